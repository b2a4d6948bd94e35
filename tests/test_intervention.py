"""The intervention point: invisible when unused, faithful when capturing, strict about families."""

from __future__ import annotations

import pytest
import torch
from tiny_models import FAMILIES, tiny_batch, tiny_classifier

from attnlab import models
from attnlab.intervention import Intervention


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
        mask = models.layer_mask(model, hidden, batch["attention_mask"])
        split = models.classify(model, models.run_layers(model, hidden, mask, 0))
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
