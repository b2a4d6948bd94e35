"""The attention sublayer's output as a sum of per-token, per-head parts: what the norm-based
methods (attention_norm, alti) decompose.

Layer l's attention sublayer computes, for query position i (head h, value vector v^h_j of
key j, output projection W_O = [W_O^1 ... W_O^H] with bias b_O, layer input x),

    a_i = Σ_j Σ_h α^h_ij f^h(x_j) + b_O,      f^h(x_j) = v^h_j W_O^h

(the value bias is inside v^h_j; b_O belongs to no token). Every family here is post-LN:
the sublayer's output is LN(z_i) with z_i = a_i + x_i.
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


def transformed_values(values: torch.Tensor, out_proj: nn.Linear) -> torch.Tensor:
    """f^h(x_j) = v^h_j W_O^h of (H, n, d_v) value vectors, as (H, n, d)."""
    n_heads, _, d_v = values.shape
    # nn.Linear's weight is (d, H·d_v); head h reads columns h·d_v .. (h+1)·d_v − 1
    weight = out_proj.weight.view(-1, n_heads, d_v)
    return torch.einsum("hnk,dhk->hnd", values, weight.to(values))


def head_parts(probs: torch.Tensor, transformed: torch.Tensor) -> torch.Tensor:
    """Σ_h α^h_ij f^h(x_j) of (H, n, n) probabilities and (H, n, d) f(x), as (n, n, d)."""
    return torch.einsum("hij,hjd->ijd", probs, transformed)


def sublayers(model: PreTrainedModel, captured: Captured) -> Iterator[Sublayer]:
    """The attention sublayer of every layer of `model` on the captured example, in order."""
    for layer in range(captured.probs.shape[0]):
        out_proj, layer_norm = models.attention_sublayer(model, layer)
        yield Sublayer(captured.probs[layer], captured.states[layer][0],
                       transformed_values(captured.values[layer], out_proj), out_proj,
                       layer_norm)
