"""The intervention point: invisible when unused, faithful when capturing, strict about families."""

from __future__ import annotations

import pytest
import torch
from tiny_models import FAMILIES, tiny_batch, tiny_classifier

from attnlab.engine import models
from attnlab.engine.intervention import Intervention


def _inputs(batch):
    return {k: v for k, v in batch.items() if k != "labels"}


@pytest.mark.parametrize("family", FAMILIES)
def test_unmodified_forward_is_bit_identical_to_stock_eager(family):
    stock = tiny_classifier(family)
    batch = _inputs(tiny_batch(family))
    with torch.no_grad():
        expected = stock(**batch).logits
        ours = models.prepare_model(tiny_classifier(family))
        assert torch.equal(ours(**batch).logits, expected)
        assert torch.equal(models.logits(ours, batch, Intervention()), expected)
        assert torch.equal(models.logits(ours, batch, Intervention(capture=True)), expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_capture_equals_stock_output_attentions(family):
    stock = tiny_classifier(family)
    batch = _inputs(tiny_batch(family))
    with torch.no_grad():
        out = stock(**batch, output_attentions=True)
        stock_attention = out.encoder_attentions if family == "bart" else out.attentions
        capture = Intervention(capture=True)
        models.logits(models.prepare_model(tiny_classifier(family)), batch, capture)
    assert sorted(capture.probs) == list(range(len(stock_attention)))
    for layer, expected in enumerate(stock_attention):
        assert torch.equal(capture.probs[layer], expected)


@pytest.mark.parametrize("family", [f for f in FAMILIES if models.FAMILIES[f].split])
def test_split_forward_equals_whole_forward(family):
    """Embeddings + layer stack + head, as the engine runs them, give the model's logits."""
    model = models.prepare_model(tiny_classifier(family))
    batch = _inputs(tiny_batch(family))
    with torch.no_grad():
        hidden = models.embed(model, batch)
        mask = models.layer_inputs(model, hidden, batch["attention_mask"])
        split = models.classify(model, models.run_layers(model, hidden, mask, 0),
                                batch["attention_mask"])
        assert torch.equal(split, models.logits(model, batch))


def test_unsupported_family_is_refused_in_one_line(tmp_path):
    model = tiny_classifier("deberta-v2")
    with pytest.raises(models.UnsupportedModelError) as error:
        models.prepare_model(model)
    message = str(error.value)
    assert "\n" not in message and "deberta-v2" in message
    assert all(family in message for family in models.FAMILIES)
    # Loading a saved checkpoint is refused before the tokenizer is even looked for.
    model.save_pretrained(tmp_path)
    with pytest.raises(models.UnsupportedModelError):
        models.load_classifier(tmp_path)


@pytest.mark.parametrize("family", FAMILIES)
def test_hidden_states_equal_the_models_own(family):
    """Embeddings and the layer stack run one layer at a time give the model's own hidden
    states (BART: its encoder's), so analyses of e^l see what the classifier sees."""
    model = models.prepare_model(tiny_classifier(family))
    batch = _inputs(tiny_batch(family))
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
        expected = out.encoder_hidden_states if family == "bart" else out.hidden_states
        ours = models.hidden_states(model, batch)
    assert len(ours) == len(expected) == models.num_layers(model) + 1
    for mine, theirs in zip(ours, expected, strict=True):
        assert torch.equal(mine, theirs)


def test_layer_out_of_range_is_refused_in_one_line():
    model = models.prepare_model(tiny_classifier("bert"))
    models.check_layer(model, 2, "explanation.adversarial_attention.layers")
    with pytest.raises(ValueError) as error:
        models.check_layer(model, 3, "explanation.adversarial_attention.layers")
    assert str(error.value) == ("explanation.adversarial_attention.layers: layer 3 is out of "
                                "range; the model has 3 layers (0..2)")


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_replacement_permutation_and_key_map_change_nothing(family):
    """Replacing each layer's probabilities by themselves, permuting keys by the identity and
    mapping keys to themselves run the same operations on the same numbers: bit-identical."""
    model = models.prepare_model(tiny_classifier(family))
    batch = _inputs(tiny_batch(family))
    with torch.no_grad():
        capture = Intervention(capture=True)
        expected = models.logits(model, batch, capture)
        width = batch["input_ids"].shape[1]
        identity = {layer: torch.arange(width).expand(probs.shape)
                    for layer, probs in capture.probs.items()}
        same = Intervention(replace=dict(capture.probs), permute=identity,
                            key_map=lambda layer, key: key)
        assert torch.equal(models.logits(model, batch, same), expected)
        assert sorted(same.keys) == sorted(capture.probs)


def test_captured_values_are_the_value_projection_of_the_layer_input():
    model = models.prepare_model(tiny_classifier("bert"))
    batch = _inputs(tiny_batch("bert"))
    with torch.no_grad():
        capture = Intervention(capture_values=True)
        models.logits(model, batch, capture)
        hidden = models.hidden_states(model, batch)
        for layer in range(models.num_layers(model)):
            value = model.bert.encoder.layer[layer].attention.self.value(hidden[layer])
            expected = value.view(*value.shape[:2], 4, -1).transpose(1, 2)  # (B, H, S, d_v)
            assert torch.allclose(capture.values[layer], expected, rtol=0, atol=1e-6)
    assert capture.probs == {}  # values only: nothing else recorded
