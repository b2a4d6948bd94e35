"""The attention sublayer's output as a sum of per-token, per-head parts: what the norm-based
methods (attention_norm, alti, globenc) decompose.

Layer l's attention sublayer computes, for query position i (head h, value vector v^h_j of
key j, output projection W_O = [W_O^1 ... W_O^H] with bias b_O, layer input x),

    a_i = Σ_j Σ_h α^h_ij f^h(x_j) + b_O,      f^h(x_j) = v^h_j W_O^h

(the value bias is inside v^h_j; b_O belongs to no token); attention_norm needs no more, in
every family. ALTI and GlobEnc need the post-LN encoders' layer norms (`sublayers`):
the sublayer's output is LN(z_i) with z_i = a_i + x_i. With the residual given to the token
itself, z_i = Σ_j z_ij + b_O, z_ij = Σ_h α^h_ij f^h(x_j) + [i = j] x_i; LN is linear once its
scale σ_i = sqrt(Var(z_i) + ε) is fixed, so with L(v) = γ ⊙ (v − mean(v)) token j's part of
the output is T_ij = L(z_ij)/σ_i (`normalised_parts`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import nn
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured


class Sublayer(NamedTuple):
    """One layer's attention sublayer on one example."""

    probs: torch.Tensor  # (H, n, n) α^h
    hidden: torch.Tensor  # (n, d) the layer's input x
    transformed: torch.Tensor  # (H, n, d) f^h(x_j)
    out_proj: nn.Linear
    layer_norm: nn.LayerNorm


def transformed_values(values: torch.Tensor, out_weight: torch.Tensor) -> torch.Tensor:
    """f^h(x_j) = v^h_j W_O^h of (H, n, d_v) value vectors, as (H, n, d); `out_weight`: W_O as
    nn.Linear stores it, (d, H·d_v) (models.output_projection)."""
    n_heads, _, d_v = values.shape
    # head h reads columns h·d_v .. (h+1)·d_v − 1
    weight = out_weight.view(-1, n_heads, d_v)
    return torch.einsum("hnk,dhk->hnd", values, weight.to(values))


def head_parts(probs: torch.Tensor, transformed: torch.Tensor) -> torch.Tensor:
    """Σ_h α^h_ij f^h(x_j) of (H, n, n) probabilities and (H, n, d) f(x), as (n, n, d)."""
    return torch.einsum("hij,hjd->ijd", probs, transformed)


def normalised_parts(sublayer: Sublayer) -> tuple[torch.Tensor, torch.Tensor]:
    """Token j's part T_ij of the sublayer's layer-norm output at i, as (n, n, d), and the
    norm's scale σ_i, as (n,)."""
    parts = head_parts(sublayer.probs, sublayer.transformed)
    parts = parts + torch.diag_embed(sublayer.hidden.T).permute(1, 2, 0)  # + [i = j] x_i
    total = parts.sum(dim=1) + sublayer.out_proj.bias  # z_i, what the layer norm sees
    norm = sublayer.layer_norm
    sigma = (total.var(dim=-1, unbiased=False) + norm.eps).sqrt()
    pieces = norm.weight * (parts - parts.mean(dim=-1, keepdim=True)) / sigma[:, None, None]
    return pieces, sigma


def sublayers(model: PreTrainedModel, captured: Captured) -> Iterator[Sublayer]:
    """The attention sublayer of every layer of `model` on the captured example, in order."""
    for layer in range(captured.probs.shape[0]):
        out_proj, layer_norm = models.attention_sublayer(model, layer)
        yield Sublayer(captured.probs[layer], captured.states[layer][0],
                       transformed_values(captured.values[layer], out_proj.weight), out_proj,
                       layer_norm)


def output_norm_inputs(model: PreTrainedModel, captured: Captured) -> list[torch.Tensor]:
    """What each layer's closing layer norm (after the feed-forward sublayer) normalises, as
    (n, d) per layer: each layer is run once more from the captured state entering it."""
    seen: list[torch.Tensor] = []
    hooks = [models.output_norm(model, layer).register_forward_pre_hook(
        lambda _module, args: seen.append(args[0][0])) for layer in range(len(captured.probs))]
    try:
        with torch.no_grad():
            first = captured.states[0]
            context = models.layer_inputs(model, first, torch.ones(
                first.shape[:2], dtype=torch.long, device=first.device))
            for layer in range(len(captured.probs)):
                models.run_layers(model, captured.states[layer], context, layer, layer + 1)
    finally:
        for hook in hooks:
            hook.remove()
    return seen
