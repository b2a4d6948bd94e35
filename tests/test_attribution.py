"""The attribution engine (methods.md §1) against its defining properties and an independent
brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import FAMILIES, tiny_batch, tiny_classifier
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from attnlab import models
from attnlab.attribution import QUADRATURES, attribute, quadrature


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual - expected).abs().max() / expected.abs().max())


@pytest.mark.parametrize("rule", QUADRATURES)
def test_quadrature_integrates_low_degree_polynomials(rule):
    nodes, weights = quadrature(rule, 8)
    assert float(weights.sum()) == pytest.approx(1.0, abs=1e-12)
    assert ((nodes >= 0) & (nodes <= 1)).all()
    # ∫_0^1 α^3 dα = 1/4: Gauss-Legendre with 8 nodes is exact up to degree 15; Riemann sums
    # are off by O(1/m) (right sums overshoot an increasing function, left sums undershoot).
    estimate = float((weights * nodes**3).sum())
    if rule == "gauss_legendre":
        assert estimate == pytest.approx(0.25, abs=1e-14)
    else:
        assert abs(estimate - 0.25) < 1.0 / 8
        assert (estimate > 0.25) == (rule == "riemann_right")


def test_unknown_quadrature_is_one_clear_line():
    with pytest.raises(ValueError) as error:
        quadrature("simpson", 8)
    message = str(error.value)
    assert "\n" not in message and "simpson" in message and "gauss_legendre" in message


def test_gauss_legendre_completeness_within_1e3():
    model = models.prepare_model(tiny_classifier("bert"))
    result = attribute(model, tiny_batch("bert"), "gold", "gauss_legendre", steps=8)
    # F(A) - F(0·A) must be well above float32 noise for a relative error to mean anything.
    assert (result.f_full[:, None] - result.f_zero).abs().min() > 1e-4
    assert result.completeness_error().max() <= 1e-3


def test_riemann_completeness_error_shrinks_as_steps_grow():
    model = models.prepare_model(tiny_classifier("bert"))
    batch = tiny_batch("bert")
    errors = [
        float(attribute(model, batch, "gold", "riemann_right", steps=m).completeness_error().mean())
        for m in (5, 10, 20, 40)
    ]
    assert all(a > b for a, b in zip(errors, errors[1:], strict=False)), errors
    # The error of a Riemann sum falls as 1/m: doubling m should roughly halve it.
    assert errors[-1] < errors[0] / 4, errors


class BruteForceScaling:
    """An attention function of the test's own: multiplies the probabilities of one module by
    alpha and keeps the scaled tensor as a grad leaf. No engine or intervention code."""

    def __init__(self):
        self.module, self.alpha, self.scaled = None, 1.0, None

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                 **kwargs):
        weights = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            weights = weights + attention_mask
        weights = nn.functional.softmax(weights, dim=-1)
        if module is self.module:
            weights = (weights.detach() * self.alpha).requires_grad_(True)
            self.scaled = weights
        return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def brute_force(model, batch, layer_module, steps):
    """Right Riemann sum of ∂F(αA)/∂A, one α and one example at a time, whole model."""
    hook = BruteForceScaling()
    AttentionInterface.register("bruteforce", hook)
    AttentionMaskInterface.register("bruteforce", eager_mask)  # else no padding/causal masks
    model.set_attn_implementation("bruteforce")
    hook.module = layer_module
    out = []
    for b in range(len(batch["labels"])):
        n = int(batch["attention_mask"][b].sum())
        inputs = {k: v[b : b + 1, :n] for k, v in batch.items() if k != "labels"}
        total, attention = 0, None
        for k in range(1, steps + 1):
            hook.alpha = k / steps
            probs = torch.softmax(model(**inputs).logits, dim=-1)
            (grad,) = torch.autograd.grad(probs[0, batch["labels"][b]], hook.scaled)
            total = total + grad[0] / steps
            attention = hook.scaled[0].detach() / hook.alpha
        out.append(attention * total)
    return out


def attention_module(model, family, layer):
    family_spec = models.FAMILIES[family]
    stack = models.layer_stack(model)
    module = stack[layer]
    for name in family_spec.attention.split("."):
        module = getattr(module, name)
    return module


@pytest.mark.parametrize("family", FAMILIES)
def test_engine_matches_brute_force_reference(family):
    # float64 so that the comparison tests the method, not float32 summation order.
    model = tiny_classifier(family, dtype=torch.float64)
    batch = tiny_batch(family)
    layer = 1
    expected = brute_force(model, batch, attention_module(model, family, layer), steps=6)
    result = attribute(models.prepare_model(model), batch, "gold", "riemann_right", steps=6,
                       batch_size=5)
    for b, reference in enumerate(expected):
        n = reference.shape[-1]
        assert relative_error(result.attr[b, layer, :, :n, :n], reference) <= 1e-5


@pytest.mark.parametrize("family", ["bert", "bart"])
def test_padding_and_batch_invariance(family):
    """An example gets the same attributions alone and inside a padded batch, whatever the
    number of scaled copies per forward pass. 1e-5: float32 sums in another order."""
    model = models.prepare_model(tiny_classifier(family))
    batch = tiny_batch(family, lengths=(9, 5, 7))
    together = attribute(model, batch, "gold", "gauss_legendre", steps=4, batch_size=5)
    n = 5
    alone_batch = {k: v[1:2, :n] if v.dim() == 2 else v[1:2] for k, v in batch.items()}
    alone = attribute(model, alone_batch, "gold", "gauss_legendre", steps=4, batch_size=3)
    assert relative_error(together.attr[1, :, :, :n, :n], alone.attr[0]) <= 1e-5
    assert together.attr[1, :, :, n:].abs().max() == 0  # nothing outside the real tokens
    assert together.attr[1, :, :, :, n:].abs().max() == 0


def test_target_pred_uses_the_models_prediction():
    model = models.prepare_model(tiny_classifier("bert"))
    batch = tiny_batch("bert")
    result = attribute(model, batch, "pred", "gauss_legendre", steps=2)
    assert torch.equal(result.target, result.probs.argmax(-1))
    np.testing.assert_allclose(result.f_full, result.probs.max(-1).values)
