"""Decoder language models (GPT-2, Llama, Qwen2, Mistral) in the engine: attribution of the
next token's probability at the last real token, checked against an independent reference
written here."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import CAUSAL_FAMILIES, VOCAB, tiny_causal_lm, tiny_prompts
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers import models as tokenizer_models
from transformers import AttentionInterface, PreTrainedTokenizerFast
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from attnlab.engine import models
from attnlab.engine.attribution import attribute, fixed_rule
from attnlab.engine.intervention import Intervention
from attnlab.plumbing.errors import AttnlabError

REFERENCE = "attnlab_test_reference"
# the reference attention's state: the layer to scale, its factor α, and the scaled leaf
_scaling: dict = {}


def _reference_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Plain eager attention of one unpadded example, its causal mask (and sliding window, as
    the module's config sets it) built here (the mask the model passes is ignored), with layer
    `_scaling["layer"]`'s probabilities times α."""
    groups = query.shape[1] // key.shape[1]
    key, value = (t.repeat_interleave(groups, dim=1) for t in (key, value))
    n = query.shape[-2]
    scores = query @ key.transpose(-1, -2) * scaling
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    # Qwen2's module says whether its layer slides; Mistral's config holds its window
    window = (module.sliding_window if hasattr(module, "sliding_window")
              else getattr(module.config, "sliding_window", None))
    if window is not None:  # key j is seen from query i when i − j < window
        future |= torch.ones(n, n, dtype=torch.bool).tril(-window)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    if module.layer_idx == _scaling.get("layer"):
        probs = (probs.detach() * _scaling["alpha"]).requires_grad_(True)
        _scaling["leaf"] = probs
    return (probs @ value).transpose(1, 2).contiguous(), probs


AttentionInterface.register(REFERENCE, _reference_attention)
AttentionMaskInterface.register(REFERENCE, eager_mask)  # built, then ignored by the reference


def _reference(model, ids: torch.Tensor, target: int, layer: int, alphas, weights, log=False):
    """F(α_k A^l) and Σ_k w_k ∂F(α_k A^l)/∂(α_k A^l) of one unpadded example, one α at a time,
    through the model's own forward (its own position ids), and A^l itself, (H, n, n)."""
    reference = copy.deepcopy(model)
    reference.set_attn_implementation(REFERENCE)
    integral, values = 0.0, []
    for alpha, weight in zip(alphas.tolist(), weights.tolist(), strict=True):
        _scaling.update(layer=layer, alpha=alpha)
        logits = reference(input_ids=ids[None]).logits[0, -1]
        f = (torch.log_softmax if log else torch.softmax)(logits, dim=-1)[target]
        (grad,) = torch.autograd.grad(f, _scaling["leaf"])
        integral = integral + weight * grad[0]
        values.append(float(f.detach()))
    _scaling.update(layer=layer, alpha=1.0)
    with torch.no_grad():
        reference(input_ids=ids[None])
    return values, integral, _scaling.pop("leaf")[0].detach()


def _real(batch, row):
    return batch["input_ids"][row][batch["attention_mask"][row].bool()]


def _real_block(tensor, batch, row):
    """(L, H, n, n) of example `row`'s real tokens out of a padded (B, L, H, S, S)."""
    real = batch["attention_mask"][row].bool()
    return tensor[row][..., real, :][..., real]


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_attribution_equals_an_independent_reference(family, side):
    """The engine, batched and padded on either side, equals a one-α-at-a-time float64 loop
    over each example alone through the model's own forward. 1e-6: both are float64, the
    only differences are the order of sums (about 1e-15 here)."""
    model = models.prepare_model(tiny_causal_lm(family))
    batch = tiny_prompts(side=side)
    rule = fixed_rule("gauss_legendre", 4)
    engine = attribute(model, batch, "gold", rule, batch_size=5)
    for row in range(len(batch["labels"])):
        ids, target = _real(batch, row), int(batch["labels"][row])
        for layer in range(models.num_layers(model)):
            f_nodes, integral, attention = _reference(model, ids, target, layer, *rule)
            expected = attention * integral
            got = _real_block(engine.attr, batch, row)[layer]
            assert torch.allclose(got, expected, rtol=0, atol=1e-6)
            assert got.abs().max() > 1e-4  # something was attributed
            # the causal mask is intact: nothing is attributed to a future token
            assert not got.triu(1).any()
            f_zero, _, _ = _reference(model, ids, target, layer, torch.zeros(1), torch.ones(1))
            assert float(engine.f_zero[row, layer]) == pytest.approx(f_zero[0], abs=1e-12)
        f_full, _, _ = _reference(model, ids, target, 0, torch.ones(1), torch.ones(1))
        assert float(engine.f_full[row]) == pytest.approx(f_full[0], abs=1e-12)


def test_log_probability_is_attributed_when_asked():
    """score="log_probability": F is log p(target); same reference, its log."""
    model = models.prepare_model(tiny_causal_lm("llama", seed=1))
    batch = tiny_prompts(lengths=(5, 3), seed=1)
    rule = fixed_rule("gauss_legendre", 4)
    engine = attribute(model, batch, "gold", rule, score="log_probability")
    assert torch.allclose(engine.f_full, engine.probs.gather(1, batch["labels"][:, None])[:, 0]
                          .log())
    for row in range(2):
        for layer in range(models.num_layers(model)):
            _, integral, attention = _reference(model, _real(batch, row),
                                                int(batch["labels"][row]), layer, *rule, log=True)
            got = _real_block(engine.attr, batch, row)[layer]
            assert torch.allclose(got, attention * integral, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_completeness_per_layer(family):
    """Adaptive rule: every layer's attributions sum to F(A) − F(0·A^l) within the tolerance,
    with F(0·A^l) from the reference (not from the engine's own bookkeeping)."""
    model = models.prepare_model(tiny_causal_lm(family, seed=2))
    batch = tiny_prompts(seed=2)
    tolerance = 1e-4
    engine = attribute(model, batch, "pred", "adaptive", tolerance=tolerance, max_steps=240)
    for row in range(len(batch["labels"])):
        ids, target = _real(batch, row), int(engine.target[row])
        f_full, _, _ = _reference(model, ids, target, 0, torch.ones(1), torch.ones(1))
        for layer in range(models.num_layers(model)):
            f_zero, _, _ = _reference(model, ids, target, layer, torch.zeros(1), torch.ones(1))
            total = float(engine.attr[row, layer].sum())
            assert total == pytest.approx(f_full[0] - f_zero[0], abs=tolerance)
            assert abs(f_full[0] - f_zero[0]) > 10 * tolerance  # the check is not vacuous


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_an_example_alone_and_in_a_batch_padded_on_either_side_gives_the_same(family):
    """Batch and padding invariance: the middle example alone (no padding) and in a batch of
    longer and shorter ones, right- and left-padded. 1e-9: float64, sums in another order."""
    model = models.prepare_model(tiny_causal_lm(family, seed=3))
    rule = fixed_rule("gauss_legendre", 3)
    results = {}
    for side in ("right", "left"):
        batch = tiny_prompts(lengths=(8, 5, 3), seed=3, side=side)
        results[side] = (batch, attribute(model, batch, "gold", rule))
    batch, _ = results["right"]
    alone = {"input_ids": _real(batch, 1)[None], "attention_mask": torch.ones(1, 5, dtype=int),
             "labels": batch["labels"][1:2]}
    single = attribute(model, alone, "gold", rule)
    for side, (padded, result) in results.items():
        assert torch.allclose(_real_block(result.attr, padded, 1), single.attr[0],
                              rtol=0, atol=1e-9), side
        assert float(result.f_full[1]) == pytest.approx(float(single.f_full[0]), abs=1e-12)
        # no attribution to padding
        pad = ~padded["attention_mask"][1].bool()
        assert not result.attr[1][..., pad, :].any() and not result.attr[1][..., pad].any()


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_logits_split_and_whole_are_the_models_next_token_logits(family):
    """models.logits (a whole pass) and embed + run_layers + classify (the engine's split
    pass) give each padded example's next-token logits as the model gives them alone."""
    model = models.prepare_model(tiny_causal_lm(family, seed=4))
    for side in ("right", "left"):
        batch = tiny_prompts(seed=4, side=side)
        with torch.no_grad():
            whole = models.logits(model, batch)
            hidden = models.embed(model, batch)
            context = models.layer_inputs(model, hidden, batch["attention_mask"])
            split = models.classify(model, models.run_layers(model, hidden, context, 0),
                                    batch["attention_mask"])
            alone = torch.stack([model(input_ids=_real(batch, row)[None]).logits[0, -1]
                                 for row in range(len(batch["labels"]))])
        assert torch.allclose(whole, alone, rtol=0, atol=1e-12), side
        assert torch.allclose(split, alone, rtol=0, atol=1e-12), side


def test_captured_attention_is_causal_and_every_real_row_sums_to_one():
    model = models.prepare_model(tiny_causal_lm("gpt2"))
    batch = tiny_prompts(side="left")
    seen = Intervention(capture=True)
    with torch.no_grad():
        models.logits(model, batch, seen)
    real = batch["attention_mask"].bool()
    assert sorted(seen.probs) == list(range(models.num_layers(model)))
    for probs in seen.probs.values():
        for row in range(len(real)):
            queries = probs[row][:, real[row]]  # (H, n, S): padding's own rows are unused
            assert not queries[..., real[row]].triu(1).any()
            assert not queries[..., ~real[row]].any()
            assert torch.allclose(queries.sum(-1), torch.ones((), dtype=probs.dtype))


def _word_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over VOCAB tokens with an end-of-text token and no padding
    token, as GPT-2's."""
    vocab = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, VOCAB)}}
    backend = Tokenizer(tokenizer_models.WordLevel(vocab, unk_token="<|endoftext|>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")


def test_load_causal_lm_from_a_saved_directory(tmp_path):
    model = tiny_causal_lm("gpt2", dtype=torch.float32)
    model.save_pretrained(tmp_path)
    _word_tokenizer().save_pretrained(tmp_path)
    loaded, tokenizer = models.load_causal_lm(tmp_path)
    assert tokenizer.pad_token == tokenizer.eos_token  # batches can be padded
    batch = tokenizer(["w5 w7 w9", "w3 w4"], padding=True, return_tensors="pt")
    with torch.no_grad():
        got = models.logits(loaded, dict(batch))
        expected = model(input_ids=batch["input_ids"][1:, :2]).logits[0, -1]
    assert torch.allclose(got[1], expected, atol=1e-5)  # float32
    assert loaded.config._attn_implementation == "attnlab"


def test_unsupported_decoder_family_is_refused_in_one_line(tmp_path):
    model = tiny_causal_lm("gpt_neo", dtype=torch.float32)
    with pytest.raises(models.UnsupportedModelError) as error:
        models.prepare_model(model)
    assert "\n" not in str(error.value) and "gpt_neo" in str(error.value)
    model.save_pretrained(tmp_path)
    with pytest.raises(models.UnsupportedModelError) as error:
        models.load_causal_lm(tmp_path)
    assert "\n" not in str(error.value) and "gpt_neo" in str(error.value)


def test_norm_based_methods_refuse_pre_ln_decoders():
    with pytest.raises(models.UnsupportedModelError, match="pre-LN"):
        models.attention_sublayer(tiny_causal_lm("llama"), 0)


def test_a_decoder_family_is_not_loaded_as_a_classifier(tmp_path):
    """A GPT-2 checkpoint given to load_classifier (its GPT2ForSequenceClassification is not
    supported: the family's head is the next-token one): refused in one line."""
    tiny_causal_lm("gpt2", dtype=torch.float32).save_pretrained(tmp_path)
    _word_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(models.UnsupportedModelError) as error:
        models.load_classifier(tmp_path)
    assert "\n" not in str(error.value) and "load_causal_lm" in str(error.value)


def test_a_missing_causal_lm_is_one_line(tmp_path):
    """Neither a local directory nor a hub id this offline machine holds: one line naming it."""
    with pytest.raises(AttnlabError) as error:
        models.load_causal_lm("nobody/no-such-decoder")
    assert "\n" not in str(error.value)
    assert str(error.value).startswith("nobody/no-such-decoder: the model cannot be loaded")
