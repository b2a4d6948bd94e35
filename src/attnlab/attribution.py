"""Self-attention attribution (Hao et al. 2021), methods.md §1.

    Attr_h(A^l) = A^l_h ⊙ ∫_0^1 ∂F(α A^l) / ∂A^l_h dα

F is the softmax probability of the target class; only layer l's probabilities are scaled
(all heads jointly, rows not renormalised). The integral is a quadrature over nodes α_k
with weights w_k. The engine batches scaled copies of several examples into one forward
pass (`batch_size` rows), and for encoder-only families starts each copy from the cached
hidden state entering layer l instead of recomputing the layers below it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel

from attnlab import models
from attnlab.intervention import Intervention

QUADRATURES = ("riemann_right", "riemann_left", "gauss_legendre")
TARGETS = ("gold", "pred")


def quadrature(rule: str, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes α_k in [0, 1] and weights w_k with Σ_k w_k g(α_k) ≈ ∫_0^1 g(α) dα."""
    if steps < 1:
        raise ValueError(f"attribution.steps must be >= 1, got {steps}")
    if rule == "riemann_right":  # the paper: α_k = k/m, k = 1..m
        nodes = np.arange(1, steps + 1) / steps
        weights = np.full(steps, 1.0 / steps)
    elif rule == "riemann_left":  # the official code: k = 0..m-1
        nodes = np.arange(steps) / steps
        weights = np.full(steps, 1.0 / steps)
    elif rule == "gauss_legendre":
        x, w = np.polynomial.legendre.leggauss(steps)
        nodes, weights = (x + 1) / 2, w / 2
    else:
        raise ValueError(
            f"attribution.quadrature: unknown rule {rule!r}; choose one of {', '.join(QUADRATURES)}"
        )
    return torch.tensor(nodes), torch.tensor(weights)


@dataclass
class Attribution:
    """Attributions of a batch of B examples over L layers and H heads (S = padded length).

    attr and attention are zero outside each example's real tokens.
    """

    attr: torch.Tensor  # (B, L, H, S, S)
    attention: torch.Tensor  # (B, L, H, S, S)
    probs: torch.Tensor  # (B, C) class probabilities of the unmodified model
    target: torch.Tensor  # (B,) the class F is the probability of
    f_full: torch.Tensor  # (B,) F(A)
    f_zero: torch.Tensor  # (B, L) F with layer l's attention scaled by 0

    def completeness_error(self) -> torch.Tensor:
        """(B, L) |Σ Attr(A^l) − (F(A) − F(0·A^l))| / |F(A) − F(0·A^l)|."""
        total = self.attr.sum(dim=(2, 3, 4))
        delta = self.f_full[:, None] - self.f_zero
        return (total - delta).abs() / delta.abs().clamp_min(1e-12)


def _target_probability(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return _softmax(logits).gather(1, target[:, None]).squeeze(1)


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    # At least float32: half-precision probabilities lose the small differences F(αA) makes.
    return torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))


class _Runner:
    """Forward passes of copies of the batch's examples with layer l's attention scaled."""

    def __init__(self, model: PreTrainedModel, inputs: dict[str, torch.Tensor]):
        self.model = model
        self.inputs = {k: v for k, v in inputs.items() if k != "labels"}
        self.split = models.family_of(model).split
        capture = Intervention(capture=True)
        with torch.no_grad():
            if self.split:
                hidden = models.embed(model, self.inputs)
                self.mask = models.layer_mask(model, hidden, self.inputs["attention_mask"])
                self.hidden_in = [hidden]  # hidden state entering each layer
                for layer in range(models.num_layers(model)):
                    hidden = models.run_layers(model, hidden, self.mask, layer, layer + 1, capture)
                    self.hidden_in.append(hidden)
                self.logits = models.classify(model, hidden)
            else:
                self.logits = models.logits(model, self.inputs, capture)
        self.attention = torch.stack([capture.probs[i] for i in sorted(capture.probs)], dim=1)

    def target_probability(
        self, layer: int, rows: torch.Tensor, alphas: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, Intervention]:
        """F for example copies `rows` with layer `layer` scaled by `alphas` (one per row)."""
        intervention = Intervention(scale_layer=layer, scale=alphas)
        if self.split:
            mask = None if self.mask is None else self.mask[rows]
            hidden = models.run_layers(
                self.model, self.hidden_in[layer][rows], mask, layer, None, intervention
            )
            out = models.classify(self.model, hidden)
        else:
            rows_inputs = {k: v[rows] for k, v in self.inputs.items()}
            out = models.logits(self.model, rows_inputs, intervention)
        return _target_probability(out, target[rows]), intervention


def attribute(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    target: str | torch.Tensor = "gold",
    quadrature_rule: str = "gauss_legendre",
    steps: int = 6,
    batch_size: int = 32,
) -> Attribution:
    """Attr_h(A^l) for every layer l and head h of every example in `inputs`.

    `inputs` is a tokenized batch (input_ids, attention_mask, optional token_type_ids, and
    `labels` when target is "gold"). `target`: "gold", "pred" or a tensor of class indices.
    `batch_size` is the number of scaled copies per forward pass.
    """
    nodes, weights = quadrature(quadrature_rule, steps)
    runner = _Runner(model, inputs)
    device = runner.logits.device
    if isinstance(target, str):
        if target not in TARGETS:
            raise ValueError(f"attribution.target: {target!r} is not one of {', '.join(TARGETS)}")
        target = inputs["labels"] if target == "gold" else runner.logits.argmax(-1)
    target = target.to(device)
    n_examples, n_layers = runner.attention.shape[:2]
    f_full = _target_probability(runner.logits, target)

    # Every (example, node) pair is one row; rows are processed batch_size at a time.
    rows = torch.arange(n_examples, device=device).repeat_interleave(len(nodes))
    row_nodes = torch.arange(len(nodes)).repeat(n_examples)
    alphas = nodes.to(device)[row_nodes]
    row_weights = weights.to(device=device, dtype=torch.float64)[row_nodes]
    everyone = torch.arange(n_examples, device=device)

    integral = torch.zeros(runner.attention.shape, dtype=torch.float64, device=device)
    f_zero = torch.zeros(n_examples, n_layers, dtype=f_full.dtype, device=device)
    for layer in range(n_layers):
        with torch.no_grad():
            f_zero[:, layer], _ = runner.target_probability(
                layer, everyone, torch.zeros(n_examples, dtype=nodes.dtype, device=device), target
            )
        for start in range(0, len(rows), batch_size):
            chunk = slice(start, start + batch_size)
            with torch.enable_grad():
                f, intervention = runner.target_probability(
                    layer, rows[chunk], alphas[chunk], target
                )
                (grad,) = torch.autograd.grad(f.sum(), intervention.scaled)
            weighted = grad.double() * row_weights[chunk].view(-1, 1, 1, 1)
            integral[:, layer].index_add_(0, rows[chunk], weighted)

    real = inputs["attention_mask"].to(device=device, dtype=runner.attention.dtype)
    real_pairs = (real[:, :, None] * real[:, None, :])[:, None, None]
    attention = runner.attention * real_pairs
    attr = (attention.double() * integral).to(attention.dtype) * real_pairs
    return Attribution(
        attr=attr,
        attention=attention,
        probs=_softmax(runner.logits),
        target=target,
        f_full=f_full,
        f_zero=f_zero,
    )
