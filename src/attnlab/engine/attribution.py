"""Self-attention attribution (Hao et al. 2021).

    Attr_h(A^l) = A^l_h ⊙ ∫_0^1 ∂F(α A^l) / ∂A^l_h dα

F is the softmax probability of the target class (or its log, `score`); for a decoder language
model the class is the token after the example's last real token (models.read_positions).
Only layer l's probabilities are scaled (all heads jointly, rows not renormalised; a decoder's
causal mask stays: the entries above the diagonal are zero at every α). The integral is a
quadrature over nodes α_k with weights w_k: a fixed rule (`riemann_right`, the paper's
α_k = k/m; `riemann_left`, the official code's k = 0..m−1; `gauss_legendre`) or the adaptive
rule below. The engine batches scaled copies of several examples into one forward pass (at
most `batch_size` rows), and (every family but BART's classifier) starts each copy from the
cached hidden state entering layer l instead of recomputing the layers below it, in a pass
only as wide as its longest example.

The adaptive rule rests on two exact facts. Completeness holds on every sub-interval,
Σ_h,i,j A ⊙ ∫_a^b ∂F/∂(αA) dα = F(bA) − F(aA), so every panel of the integral has its own
check; and F along the path costs a forward pass, no backward. Per example and layer:
1. scan: F at α = k/scan_steps, k = 0..scan_steps (forward passes only);
2. panels: consecutive scan intervals are merged while every scan point inside lies within
   `tolerance` of the straight line between the merged panel's ends — where F is smooth the
   whole path is one panel, where it steps or dips each scan interval is its own;
3. each panel is integrated by 3-node Gauss–Legendre (exact for polynomials of degree 5; its
   middle node is the panel's midpoint, so F there comes with the gradient); a panel whose
   residual |Σ A ⊙ ∫_panel − (F(b) − F(a))| exceeds tolerance × (b − a) is halved, and so on
   until every panel passes — then |Σ_h,i,j Attr_h(A^l) − (F(A) − F(0·A^l))| ≤ tolerance — or
   the next halving would take the example's layer past `max_steps` gradient nodes (reported
   in `nodes` and `residual`, never silently).
What neither check sees: a dip of F that lies between two scan points and between a panel's
nodes and ends where it began. The scan resolves every dip wider than 1/scan_steps (a scan
point falls inside it); a narrower one is found only if a Gauss–Legendre node lands on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.intervention import Intervention
from attnlab.engine.options import ENGINE_KEYS

FIXED_RULES = ("riemann_right", "riemann_left", "gauss_legendre")
QUADRATURES = ("adaptive", *FIXED_RULES)
TARGETS = ("gold", "pred")
SCORES = ("probability", "log_probability")
PANEL_NODES = 3  # Gauss–Legendre nodes per panel of the adaptive rule
# A forward pass runs as wide as its widest row; a pass is cut short rather than spend more than
# this share of its tokens on padding. On MiniLM and 8 real sentences (6 to 58 tokens) at 64 rows
# per pass, 0.2 cut the FLOPs run from 945 to 600 GFLOP (the examples' own: 596); 0.1 saved no
# more with a quarter more passes.
MAX_PADDING = 0.2


def fixed_rule(rule: str, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes α_k in [0, 1] and weights w_k with Σ_k w_k g(α_k) ≈ ∫_0^1 g(α) dα of the fixed
    rule named `rule`."""
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


def composite_gauss_legendre(panels: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes and weights of `steps`-node Gauss–Legendre on each of `panels` equal panels of
    [0, 1]: the converged reference the quadrature study measures every rule against."""
    nodes, weights = fixed_rule("gauss_legendre", steps)
    starts = torch.arange(panels, dtype=torch.float64)[:, None]
    return ((starts + nodes) / panels).flatten(), (weights / panels).repeat(panels)


@dataclass
class Attribution:
    """Attributions of a batch of B examples over L layers (those attributed: every layer, or
    `attribute`'s `layers`) and H heads (S = padded length).

    attr and attention are zero outside each example's real tokens.
    """

    attr: torch.Tensor  # (B, L, H, S, S)
    attention: torch.Tensor  # (B, L, H, S, S)
    probs: torch.Tensor  # (B, C) class (a decoder: next-token) probabilities, unmodified model
    target: torch.Tensor  # (B,) the class F is the probability (or log-probability) of
    f_full: torch.Tensor  # (B,) F(A)
    f_zero: torch.Tensor  # (B, L) F with layer l's attention scaled by 0
    nodes: torch.Tensor  # (B, L) gradient evaluations spent on the integral
    residual: torch.Tensor  # (B, L) Σ Attr(A^l) − (F(A) − F(0·A^l)), in float64

    def completeness_error(self) -> torch.Tensor:
        """(B, L) |Σ Attr(A^l) − (F(A) − F(0·A^l))| / |F(A) − F(0·A^l)|."""
        delta = (self.f_full[:, None] - self.f_zero).double()
        return self.residual.abs() / delta.abs().clamp_min(1e-12)


def _score(logits: torch.Tensor, target: torch.Tensor, score: str) -> torch.Tensor:
    """F: the target's probability or log-probability, one per row of (B, C) logits."""
    # At least float32: half-precision probabilities lose the small differences F(αA) makes.
    dtype = torch.promote_types(logits.dtype, torch.float32)
    normalise = torch.log_softmax if score == "log_probability" else torch.softmax
    return normalise(logits, dim=-1, dtype=dtype).gather(1, target[:, None]).squeeze(1)


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))


class _Runner:
    """Forward passes of copies of the batch's examples with layer l's attention scaled."""

    def __init__(self, model: PreTrainedModel, inputs: dict[str, torch.Tensor],
                 score: str = "probability"):
        self.model, self.score = model, score
        self.inputs = {k: v for k, v in inputs.items() if k != "labels"}
        self.split = models.family_of(model).split
        real = self.inputs["attention_mask"].bool()
        # one past each example's last real token: the width a pass of its copies needs
        positions = torch.arange(1, real.shape[1] + 1, device=real.device)
        self.widths = (positions * real).amax(dim=1).clamp_min(1).cpu()
        capture = Intervention(capture=True)
        with torch.no_grad():
            if self.split:
                hidden = models.embed(model, self.inputs)
                self.context = models.layer_inputs(model, hidden, self.inputs["attention_mask"])
                self.hidden_in = [hidden]  # hidden state entering each layer
                for layer in range(models.num_layers(model)):
                    hidden = models.run_layers(model, hidden, self.context, layer, layer + 1,
                                               capture)
                    self.hidden_in.append(hidden)
                self.logits = models.classify(model, hidden, self.inputs["attention_mask"])
            else:
                self.logits = models.logits(model, self.inputs, capture)
        self.attention = torch.stack([capture.probs[i] for i in sorted(capture.probs)], dim=1)

    def target_probability(
        self, layer: int, rows: torch.Tensor, alphas: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, Intervention]:
        """F (the score: probability or log-probability) for example copies `rows` with layer
        `layer` scaled by `alphas` (one per row)."""
        intervention = Intervention(scale_layer=layer, scale=alphas)
        if self.split:
            # A pass runs only as wide as its rows' last real token: its rows are copies of
            # examples of similar length (`passes`), and a padded position costs as much as a
            # token. The positions cut off are padding of every row, which no real token attends
            # to, so F and the gradients at the real tokens are unchanged.
            width = int(self.widths[rows.cpu()].max())
            hidden = models.run_layers(self.model, self.hidden_in[layer][rows, :width],
                                       self.context.select(rows, width), layer, None,
                                       intervention)
            out = models.classify(self.model, hidden,
                                  self.inputs["attention_mask"][rows, :width])
        else:
            rows_inputs = {k: v[rows] for k, v in self.inputs.items()}
            out = models.logits(self.model, rows_inputs, intervention)
        return _score(out, target[rows], self.score), intervention

    def passes(self, rows: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
        """Indices into `rows`, one forward pass each: rows in order of their examples' length,
        at most `batch_size` of them, cut early where padding to the widest would take more than
        MAX_PADDING of the pass. Memory stays within `batch_size` rows of the longest example."""
        if not self.split:  # run whole at the batch's width: nothing to save
            return list(torch.arange(len(rows), device=rows.device).split(batch_size))
        widths = self.widths[rows.cpu()]
        order = torch.argsort(widths, stable=True)
        chunks, start, widest, total = [], 0, 0, 0
        for end, width in enumerate(widths[order].tolist()):
            widest, total = max(widest, width), total + width
            count = end - start + 1
            if count > batch_size or count * widest * (1 - MAX_PADDING) > total:
                chunks.append(order[start:end])
                start, widest, total = end, width, width
        chunks.append(order[start:])
        return [chunk.to(rows.device) for chunk in chunks if len(chunk)]

    def scan(self, layer: int, rows: torch.Tensor, alphas: torch.Tensor, target: torch.Tensor,
             batch_size: int) -> torch.Tensor:
        """F for each (row, α) pair, forward passes only, at most `batch_size` rows per pass."""
        out = torch.empty(len(rows), dtype=torch.float64, device=rows.device)
        with torch.no_grad():
            for index in self.passes(rows, batch_size):
                f, _ = self.target_probability(layer, rows[index], alphas[index], target)
                out[index] = f.double()
        return out

    def integrate(self, layer: int, panels: torch.Tensor, rule: tuple[torch.Tensor, torch.Tensor],
                  target: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """∫_a^b ∂F(αA)/∂(αA) dα over each panel (example, a, b) by the rule's nodes on [0, 1].

        Returns the integrals (P, H, S, S) in float64 and F at every node (P, nodes).
        """
        nodes, weights = (t.to(panels) for t in rule)
        examples = panels[:, 0].long()
        width = panels[:, 2] - panels[:, 1]
        # every (panel, node) pair is one row of a forward pass
        rows = examples.repeat_interleave(len(nodes))
        alphas = (panels[:, 1:2] + width[:, None] * nodes).flatten()
        row_weights = (width[:, None] * weights).flatten()
        row_panels = torch.arange(len(panels), device=panels.device).repeat_interleave(len(nodes))
        integral = torch.zeros((len(panels), *self.attention.shape[2:]), dtype=torch.float64,
                               device=panels.device)
        f_nodes = torch.empty(len(rows), dtype=torch.float64, device=panels.device)
        for index in self.passes(rows, batch_size):
            with torch.enable_grad():
                f, intervention = self.target_probability(
                    layer, rows[index], alphas[index].to(self.attention.dtype), target
                )
                (grad,) = torch.autograd.grad(f.sum(), intervention.scaled)
            width = grad.shape[-1]  # the pass's own width (target_probability)
            integral[..., :width, :width].index_add_(
                0, row_panels[index], grad.double() * row_weights[index].view(-1, 1, 1, 1))
            f_nodes[index] = f.detach().double()
        return integral, f_nodes.view(len(panels), len(nodes))


def _scan_panels(alphas: np.ndarray, f: np.ndarray, tolerance: float) -> list[tuple[int, int]]:
    """Panels (first, last scan point) that merge scan intervals while F stays on the chord."""
    panels, first, last = [], 0, 1
    while last < len(alphas):
        candidate = last + 1
        if candidate < len(alphas):
            x, y = alphas[first : candidate + 1], f[first : candidate + 1]
            chord = y[0] + (y[-1] - y[0]) * (x - x[0]) / (x[-1] - x[0])
            if np.abs(y - chord).max() <= tolerance:
                last = candidate
                continue
        panels.append((first, last))
        first, last = last, last + 1
    return panels


def _scan(runner: _Runner, layer: int, *, target: torch.Tensor, f_zero: torch.Tensor,
          f_full: torch.Tensor, scan_steps: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The adaptive rule's scan: the grid α = k/scan_steps (k = 0..scan_steps) and F(α A^l)
    there per example (B, scan_steps + 1), forward passes only; its ends are F(0·A^l) and F(A)."""
    n_examples = len(f_full)
    grid = torch.arange(scan_steps + 1, dtype=torch.float64) / scan_steps
    f_scan = torch.empty(n_examples, scan_steps + 1, dtype=torch.float64)
    f_scan[:, 0], f_scan[:, -1] = f_zero.double().cpu(), f_full.double().cpu()
    if scan_steps > 1:
        rows = torch.arange(n_examples, device=f_full.device).repeat_interleave(scan_steps - 1)
        alphas = grid[1:-1].repeat(n_examples).to(device=f_full.device,
                                                  dtype=runner.attention.dtype)
        f_scan[:, 1:-1] = runner.scan(layer, rows, alphas, target, batch_size).view(
            n_examples, scan_steps - 1).cpu()
    return grid.numpy(), f_scan.numpy()


def _halved(example: int, panels: list[dict], *, spent: int, tolerance: float,
            max_steps: int) -> tuple[list[dict], list[tuple]]:
    """One example's integrated `panels` split into those it keeps and the halves (example, a,
    b, F(a), F(b)) of its worst ones to integrate next: while the residuals add up to more than
    the tolerance, the worst panels are halved until the others leave half the tolerance to
    the halves (globally adaptive, as QUADPACK's QAG), unless the halves would take the
    example's `spent` gradient nodes past `max_steps`."""
    remaining = sum(panel["residual"] for panel in panels)
    if remaining <= tolerance:
        return panels, []
    planned, kept, halves = spent, [], []
    for panel in sorted(panels, key=lambda panel: panel["residual"], reverse=True):
        if remaining > tolerance / 2 and planned + 2 * PANEL_NODES <= max_steps:
            remaining -= panel["residual"]
            planned += 2 * PANEL_NODES
            a, end, middle = panel["a"], panel["b"], (panel["a"] + panel["b"]) / 2
            halves += [(example, a, middle, panel["fa"], panel["f_middle"]),
                       (example, middle, end, panel["f_middle"], panel["fb"])]
        else:
            kept.append(panel)
    return kept, halves


def _adaptive_layer(runner: _Runner, layer: int, attention: torch.Tensor, *,
                    target: torch.Tensor, f_zero: torch.Tensor, f_full: torch.Tensor,
                    tolerance: float, max_steps: int, scan_steps: int,
                    batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The adaptive rule (module docstring) for every example at one layer, whose attention
    (B, H, S, S; zero outside the real tokens) it integrates against.

    Returns ∫_0^1 ∂F/∂(αA^l) dα per example (B, H, S, S) and the gradient nodes spent (B,).
    """
    device = f_full.device
    n_examples = len(attention)
    grid, f_scan = _scan(runner, layer, target=target, f_zero=f_zero, f_full=f_full,
                         scan_steps=scan_steps, batch_size=batch_size)
    # the panels (example, a, b, F(a), F(b)) to integrate
    pending = [(b, grid[i], grid[j], f_scan[b, i], f_scan[b, j])
               for b in range(n_examples) for i, j in _scan_panels(grid, f_scan[b], tolerance)]
    rule = fixed_rule("gauss_legendre", PANEL_NODES)
    done: list[list[dict]] = [[] for _ in range(n_examples)]  # each example's integrated panels
    nodes = torch.zeros(n_examples, dtype=torch.long)
    while pending:
        panels = torch.tensor([p[:3] for p in pending], dtype=torch.float64, device=device)
        parts, f_nodes = runner.integrate(layer, panels, rule, target, batch_size)
        examples = panels[:, 0].long()
        estimate = (attention[examples] * parts).sum(dim=(1, 2, 3)).cpu()
        for p, (b, a, end, fa, fb) in enumerate(pending):
            nodes[b] += PANEL_NODES
            # a copy: a view would keep the whole round's tensor alive
            done[b].append({"a": a, "b": end, "fa": fa, "fb": fb, "part": parts[p].clone(),
                            "f_middle": float(f_nodes[p, PANEL_NODES // 2]),
                            "residual": abs(float(estimate[p]) - (fb - fa))})
        touched, pending = sorted({p[0] for p in pending}), []
        for b in touched:
            done[b], halves = _halved(b, done[b], spent=int(nodes[b]), tolerance=tolerance,
                                      max_steps=max_steps)
            pending += halves
    integral = torch.zeros_like(attention)
    for b, panels_b in enumerate(done):
        for panel in panels_b:
            integral[b] += panel["part"]
    return integral, nodes.to(device)


def engine_options(attribution: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `attribute` that the config's `attribution` section (a dict or
    `Settings`) sets: its ENGINE_KEYS, under the same names."""
    return {key: attribution[key] for key in ENGINE_KEYS}


def attribute(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    target: str | torch.Tensor = "gold",
    quadrature: str | tuple[torch.Tensor, torch.Tensor] = "adaptive",
    steps: int = 6,
    batch_size: int = 32,
    *,
    tolerance: float = 1e-3,
    max_steps: int = 120,
    scan_steps: int = 8,
    score: str = "probability",
    layers: Sequence[int] | None = None,
) -> Attribution:
    """Attr_h(A^l) for every layer l and head h of every example in `inputs`, or for the
    `layers` named (in increasing order; the result's layer axis holds those alone).

    `inputs` is a tokenized batch (input_ids, attention_mask, optional token_type_ids, and
    `labels` when target is "gold"). `target`: "gold", "pred" or a tensor of class indices;
    for a decoder language model the class is the next token's id after each example's last
    real token (`labels` = the token ids to predict, one per example), padded on either side.
    `score`: F is the target's "probability" (the paper) or its "log_probability".
    `quadrature`: a name of QUADRATURES or a fixed rule's own (nodes, weights) on [0, 1].
    `steps` is the number of nodes of a named fixed rule; `tolerance` (absolute, in units of F),
    `max_steps` (gradient nodes per example and layer) and `scan_steps` (forward-only points
    of the scan) steer the adaptive rule. `batch_size` is the number of scaled copies per
    forward pass (fewer where their examples' lengths differ much: `_Runner.passes`).
    `layers` saves the time and the memory of the others (the engine holds per example only
    the analysed layers' matrices): what `attnlab.explain` offers for a long input.
    """
    rule = _rule(quadrature, steps, max_steps=max_steps, scan_steps=scan_steps)
    if score not in SCORES:
        raise ValueError(f"attribution.score: {score!r} is not one of {', '.join(SCORES)}")
    runner = _Runner(model, inputs, score)
    target = _target_classes(target, inputs, runner.logits)
    analysed = _analysed_layers(layers, runner.attention.shape[1])
    runner.attention = runner.attention[:, analysed]
    f_full = _score(runner.logits, target, score)
    real = inputs["attention_mask"].to(device=target.device, dtype=runner.attention.dtype)
    real_pairs = (real[:, :, None] * real[:, None, :])[:, None, None]
    attention = runner.attention * real_pairs
    integral, f_zero, nodes = _integrate_layers(
        runner, attention, rule, layers=analysed, target=target, f_full=f_full,
        batch_size=batch_size,
        adaptive={"tolerance": tolerance, "max_steps": max_steps, "scan_steps": scan_steps})
    attr = attention.double() * integral * real_pairs
    residual = attr.sum(dim=(2, 3, 4)) - (f_full[:, None] - f_zero).double()
    return Attribution(
        attr=attr.to(attention.dtype),
        attention=attention,
        probs=_softmax(runner.logits),
        target=target,
        f_full=f_full,
        f_zero=f_zero,
        nodes=nodes,
        residual=residual,
    )


def _rule(quadrature: str | tuple[torch.Tensor, torch.Tensor], steps: int, *, max_steps: int,
          scan_steps: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`attribute`'s quadrature as a fixed rule's (nodes, weights) on [0, 1], or None for the
    adaptive rule (once its node budget is checked to hold the scan's panels)."""
    if quadrature == "adaptive":
        if max_steps < PANEL_NODES * scan_steps:
            raise ValueError(f"attribution.max_steps ({max_steps}) must be at least "
                             f"{PANEL_NODES} x attribution.scan_steps ({scan_steps})")
        return None
    if isinstance(quadrature, str):
        return fixed_rule(quadrature, steps)
    return quadrature


def _target_classes(target: str | torch.Tensor, inputs: dict[str, torch.Tensor],
                    logits: torch.Tensor) -> torch.Tensor:
    """`attribute`'s target as class indices on the logits' device: "gold" the labels, "pred"
    the model's argmax, a tensor itself."""
    if isinstance(target, str):
        if target not in TARGETS:
            raise ValueError(f"attribution.target: {target!r} is not one of {', '.join(TARGETS)}")
        target = inputs["labels"] if target == "gold" else logits.argmax(-1)
    return target.to(logits.device)


def _analysed_layers(layers: Sequence[int] | None, count: int) -> list[int]:
    """`attribute`'s `layers` of a model of `count` layers, checked: every layer where None."""
    every = range(count)
    analysed = list(every) if layers is None else list(layers)
    if not analysed or analysed != sorted(set(analysed)) or not set(analysed) <= set(every):
        raise ValueError(f"layers: {layers} are not increasing layers of 0..{count - 1}")
    return analysed


def _integrate_layers(runner: _Runner, attention: torch.Tensor,
                      rule: tuple[torch.Tensor, torch.Tensor] | None, *, layers: list[int],
                      target: torch.Tensor, f_full: torch.Tensor, batch_size: int,
                      adaptive: dict[str, Any]
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """∫_0^1 ∂F/∂(αA^l) dα of each layer l of `layers` (`attention`'s layer axis holds those
    alone) by the fixed `rule` over the whole path, or (None) by the adaptive rule with the
    settings `adaptive`: (integrals (B, L, H, S, S) in float64, F(0·A^l) (B, L), the gradient
    nodes spent (B, L)), L = len(layers)."""
    n_examples, n_layers = attention.shape[:2]
    device = f_full.device
    everyone = torch.arange(n_examples, device=device)
    whole_path = torch.tensor([[b, 0.0, 1.0] for b in range(n_examples)], dtype=torch.float64,
                              device=device)
    integral = torch.zeros(attention.shape, dtype=torch.float64, device=device)
    f_zero = torch.zeros(n_examples, n_layers, dtype=f_full.dtype, device=device)
    nodes = torch.zeros(n_examples, n_layers, dtype=torch.long, device=device)
    for index, layer in enumerate(layers):
        f_zero[:, index] = runner.scan(
            layer, everyone, torch.zeros(n_examples, dtype=attention.dtype, device=device),
            target, batch_size
        ).to(f_full.dtype)
        if rule is None:
            integral[:, index], nodes[:, index] = _adaptive_layer(
                runner, layer, attention[:, index].double(), target=target,
                f_zero=f_zero[:, index], f_full=f_full, batch_size=batch_size, **adaptive)
        else:
            integral[:, index], _ = runner.integrate(layer, whole_path, rule, target, batch_size)
            nodes[:, index] = len(rule[0])
    return integral, f_zero, nodes


def head_maxima(attr: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """(B, L, H) max over the real (query, key) pairs of each head of attributions
    (B, L, H, S, S), `mask` the (B, S) attention mask: the dumps' attr_max."""
    real = (mask[:, :, None] * mask[:, None, :]).bool()[:, None, None]
    return attr.masked_fill(~real, -torch.inf).flatten(3).max(-1).values.numpy()
