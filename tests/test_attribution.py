"""The attribution engine (docs/methods.md) against its defining properties and an independent
brute-force reference."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from conftest import DEFAULT_CONFIG
from tiny_models import FAMILIES, tiny_batch, tiny_classifier
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from attnlab.engine import models
from attnlab.engine.attribution import (
    FIXED_RULES,
    _adaptive_layer,
    _Runner,
    attribute,
    composite_gauss_legendre,
    engine_options,
    fixed_rule,
)
from attnlab.engine.options import ENGINE_KEYS
from attnlab.plumbing.settings import Settings


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual - expected).abs().max() / expected.abs().max())


@pytest.mark.parametrize("rule", FIXED_RULES)
def test_quadrature_integrates_low_degree_polynomials(rule):
    nodes, weights = fixed_rule(rule, 8)
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
        fixed_rule("simpson", 8)
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
    for name in family_spec.layout.attention.split("."):
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


class ClosedFormPath:
    """A stand-in for the engine's runner whose F(αA) is written in closed form, so the
    adaptive rule can be checked against exact integrals: one example, one head, attention
    A = [[1, 1], [0, 0]], and F(α) a sum of sigmoids of α. The gradient is split over the two
    attended entries as α·F'(α) and (1 − α)·F'(α), so completeness is F(1) − F(0) and each
    entry's integral is known exactly (integration by parts)."""

    def __init__(self, steps: list[tuple[float, float, float]]):
        self.steps = steps  # (height, slope, centre) of each sigmoid
        self.attention = torch.tensor([[[[1.0, 1.0], [0.0, 0.0]]]], dtype=torch.float64)
        self.gradient_rows = 0

    def f(self, alpha):
        return sum(h * torch.sigmoid(s * (alpha - c)) for h, s, c in self.steps)

    def slope(self, alpha):
        return sum(h * s * torch.sigmoid(s * (alpha - c)) * torch.sigmoid(-s * (alpha - c))
                   for h, s, c in self.steps)

    def exact_entries(self) -> torch.Tensor:
        """∫ α F'(α) dα = F(1) − ∫ F dα and ∫ (1 − α) F'(α) dα = ∫ F dα − F(0) over [0, 1]."""
        softplus = torch.nn.functional.softplus
        one, zero = torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
        area = sum(h / s * (softplus(s * (one - c)) - softplus(s * (zero - c)))
                   for h, s, c in self.steps)
        return torch.stack([self.f(one) - area, area - self.f(zero)])

    def scan(self, layer, rows, alphas, target, batch_size):
        return self.f(alphas.double())

    def integrate(self, layer, panels, rule, target, batch_size):
        nodes, weights = rule
        width = panels[:, 2] - panels[:, 1]
        alphas = panels[:, 1:2] + width[:, None] * nodes
        self.gradient_rows += alphas.numel()
        slope = self.slope(alphas) * width[:, None] * weights
        parts = torch.zeros(len(panels), 1, 2, 2, dtype=torch.float64)
        parts[:, 0, 0, 0] = (slope * alphas).sum(1)
        parts[:, 0, 0, 1] = (slope * (1 - alphas)).sum(1)
        return parts, self.f(alphas)


def adaptive_on(path: ClosedFormPath, *, tolerance=1e-3, max_steps=120, scan_steps=8):
    one = torch.zeros(1, dtype=torch.float64)
    integral, nodes = _adaptive_layer(
        path, 0, path.attention, target=None,
        f_zero=path.f(one), f_full=path.f(one + 1), tolerance=tolerance, max_steps=max_steps,
        scan_steps=scan_steps, batch_size=64)
    return integral[0, 0, 0], int(nodes[0])


@pytest.mark.parametrize("tolerance", [1e-2, 1e-3, 1e-4])
@pytest.mark.parametrize("case", ["steep step", "narrow dip", "two steps"])
def test_adaptive_rule_integrates_a_steep_path_to_tolerance(case, tolerance):
    # slopes up to ~90 per unit alpha, as measured on the default run's saturated models; the
    # dip (down by 0.99 and back within ~0.15 of alpha) is wider than the scan's spacing 1/8
    path = ClosedFormPath({"steep step": [(0.99, 360.0, 0.37)],
                           "narrow dip": [(-0.99, 300.0, 0.3), (0.99, 300.0, 0.45)],
                           "two steps": [(0.6, 200.0, 0.2), (0.39, 400.0, 0.71)]}[case])
    entries, nodes = adaptive_on(path, tolerance=tolerance, max_steps=240)
    exact = path.exact_entries()
    # completeness: the guarantee (sum of the panel residuals is at most the tolerance)
    assert abs(float(entries.sum() - exact.sum())) <= tolerance
    # each entry's integral: no guarantee, but no worse than the tolerance on these paths
    assert float((entries - exact).abs().max()) <= tolerance
    assert nodes == path.gradient_rows <= 240


def test_adaptive_rule_spends_few_nodes_on_a_smooth_path_and_more_on_a_steep_one():
    smooth = ClosedFormPath([(0.1, 1.0, 0.5)])  # nearly linear, as on a random-init model
    steep = ClosedFormPath([(0.99, 360.0, 0.37)])
    smooth_entries, smooth_nodes = adaptive_on(smooth)
    _, steep_nodes = adaptive_on(steep)
    assert float((smooth_entries - smooth.exact_entries()).abs().max()) <= 1e-6
    assert smooth_nodes == 3  # one panel: the scan lies on a straight line within 1e-3
    assert steep_nodes >= 4 * smooth_nodes


def test_adaptive_rule_honours_max_steps():
    path = ClosedFormPath([(0.99, 360.0, 0.37)])
    entries, nodes = adaptive_on(path, tolerance=1e-6, max_steps=30)
    assert nodes <= 30 and nodes == path.gradient_rows
    # the cap stopped it short of the tolerance: the residual shows it
    assert abs(float(entries.sum() - path.exact_entries().sum())) > 1e-6


def test_completeness_holds_per_panel_to_float_precision():
    """Σ A ⊙ ∫_a^b ∂F/∂(αA) dα = F(bA) − F(aA) on any sub-interval (here [0.3, 0.6]), with a
    converged rule and float64 weights: the identity the adaptive rule checks panels by."""
    model = models.prepare_model(tiny_classifier("bert", init=0.3, dtype=torch.float64))
    batch = tiny_batch("bert")
    a, b = 0.3, 0.6
    nodes, weights = composite_gauss_legendre(4, 8)
    sub_rule = (a + (b - a) * nodes, (b - a) * weights)
    result = attribute(model, batch, "gold", sub_rule)
    runner = _Runner(model, batch)
    rows = torch.arange(len(batch["labels"]))
    for layer in range(result.attr.shape[1]):
        f_a, f_b = (runner.scan(layer, rows, torch.full((len(rows),), alpha, dtype=torch.float64),
                                batch["labels"], 64) for alpha in (a, b))
        # F moves by ~1e-2 here: 1e-10 is float64 rounding, far below any quadrature error
        assert float((f_b - f_a).abs().min()) > 1e-4
        np.testing.assert_allclose(result.attr[:, layer].sum(dim=(1, 2, 3)), f_b - f_a,
                                   atol=1e-10)


def saturated_classifier():
    """A tiny float64 BERT whose logits are scaled up 10x: for its predicted class, F(αA^l)
    is a steep step in α (slopes up to ~70 per unit α, as measured on the default run's
    trained models) in 5 of its 9 (example, layer) pairs."""
    model = tiny_classifier("bert", seed=1, init=0.3, dtype=torch.float64)
    with torch.no_grad():
        model.classifier.weight *= 10
        model.classifier.bias *= 10
    return models.prepare_model(model)


def test_adaptive_rule_matches_a_converged_reference_on_a_saturated_model():
    model = saturated_classifier()
    batch = tiny_batch("bert")
    reference = attribute(model, batch, "pred", composite_gauss_legendre(128, 8), batch_size=512)
    coarser = attribute(model, batch, "pred", composite_gauss_legendre(64, 8), batch_size=512)
    result = attribute(model, batch, "pred")  # the default: adaptive, tolerance 1e-3
    delta = reference.f_full[:, None] - reference.f_zero
    moved = delta.abs() > 0.05
    assert moved.sum() >= 3, "the test needs layers whose removal moves F"
    # the reference is converged: halving its panels changes nothing that matters
    assert float((reference.attr - coarser.attr).abs().max()) < 1e-6
    assert float(result.residual.abs().max()) <= 1e-3
    head_max = result.attr.flatten(3).max(-1).values
    reference_max = reference.attr.flatten(3).max(-1).values
    error = (head_max - reference_max).abs().max(-1).values / reference_max.abs().max(-1).values
    assert float(error[moved].max()) <= 0.01
    # a fixed rule with as many nodes on average misses by far more on this model
    mean_nodes = int(result.nodes.float().mean())
    fixed = attribute(model, batch, "pred", "gauss_legendre", steps=mean_nodes)
    assert float(fixed.residual.abs().max()) > 10 * float(result.residual.abs().max())


def test_adaptive_rule_is_batch_and_padding_invariant():
    model = saturated_classifier()
    batch = tiny_batch("bert", lengths=(9, 5, 7))
    together = attribute(model, batch, "pred", batch_size=5)
    n = 5
    alone_batch = {k: v[1:2, :n] if v.dim() == 2 else v[1:2] for k, v in batch.items()}
    alone = attribute(model, alone_batch, "pred", batch_size=3)
    assert torch.equal(together.nodes[1], alone.nodes[0])
    assert relative_error(together.attr[1, :, :, :n, :n], alone.attr[0]) <= 1e-8


def test_under_bf16_autocast_the_integral_and_attr_stay_full_precision():
    """What `precision: bf16` runs: the passes in bfloat16 on the CPU, F and Attr in float32,
    the integral and the residual in float64; within 5% of float32's per-layer maxima."""
    model = models.prepare_model(tiny_classifier("bert"))
    batch = tiny_batch("bert")
    exact = attribute(model, batch, "gold", "gauss_legendre", steps=6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = attribute(model, batch, "gold", "gauss_legendre", steps=6)
    assert low.attr.dtype == low.attention.dtype == low.f_full.dtype == torch.float32
    assert low.residual.dtype == torch.float64
    scale = exact.attr.abs().amax(dim=(2, 3, 4))
    change = ((low.attr - exact.attr).abs().amax(dim=(2, 3, 4)) / scale).max()
    assert 1e-5 < change < 0.05
    assert low.residual.abs().max() < 2e-3


def test_the_engine_keys_are_config_keys_and_the_engine_s_arguments():
    """ENGINE_KEYS (the params of every attributing rule) under one name from the config's
    `attribution` section to `attribute`'s keyword arguments."""
    assert set(ENGINE_KEYS) <= set(DEFAULT_CONFIG["attribution"])
    assert set(ENGINE_KEYS) <= set(inspect.signature(attribute).parameters)
    options = engine_options(Settings(DEFAULT_CONFIG["attribution"]))
    assert options == {key: DEFAULT_CONFIG["attribution"][key] for key in ENGINE_KEYS}
