"""ALTI (Ferrando, Gállego & Costa-jussà 2022, "Measuring the Mixing of Contextual Information
in the Transformer", EMNLP).

In the notation of attnlab.methods.sublayer_parts: split z_i into per-token parts
z_ij = Σ_h α^h_ij f^h(x_j) + [i = j] x_i (the residual belongs to the token itself). LN is
linear once its scale σ_i = sqrt(Var(z_i) + ε) is fixed, so LN(z_i) = Σ_j T_ij + (bias terms)
with T_ij = γ ⊙ (z_ij − mean(z_ij)) / σ_i. With y_i = Σ_j T_ij (the bias terms left out: they
belong to no token), the layer-wise contribution is

    c^l_ij = max(0, ‖y_i‖₁ − ‖y_i − T_ij‖₁), normalised so Σ_j C^l_ij = 1,

and ALTI aggregates the layers as rollout does (the residual is already inside):
ALTI^0 = C^0, ALTI^l = C^l ALTI^{l−1}. The feed-forward sublayer is not decomposed (as in the
paper).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel

from attnlab.engine.capture import Captured
from attnlab.methods.method import Method, as_scores
from attnlab.methods.sublayer_parts import head_parts, sublayers


def alti_layer(
    probs: torch.Tensor,
    transformed: torch.Tensor,
    hidden: torch.Tensor,
    out_proj: nn.Linear,
    layer_norm: nn.LayerNorm,
) -> torch.Tensor:
    """ALTI's layer-wise contributions C_ij (rows sum to 1) of one layer, as (n, n); `hidden`
    is the (n, d) input x of the layer."""
    parts = head_parts(probs, transformed)
    parts = parts + torch.diag_embed(hidden.T).permute(1, 2, 0)  # + [i = j] x_i
    total = parts.sum(dim=1) + out_proj.bias  # z_i, what the layer norm sees
    sigma = (total.var(dim=-1, unbiased=False) + layer_norm.eps).sqrt()
    pieces = (layer_norm.weight * (parts - parts.mean(dim=-1, keepdim=True))
              / sigma[:, None, None])
    y = pieces.sum(dim=1)
    c = (y.abs().sum(dim=-1)[:, None] - (y[:, None] - pieces).abs().sum(dim=-1)).clamp_min(0)
    return c / c.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(c.dtype).tiny)


def aggregate(contributions: torch.Tensor) -> torch.Tensor:
    """ALTI^l = C^l C^{l−1} ... C^0 of (L, n, n) layer-wise contributions."""
    out = torch.empty_like(contributions)
    product = torch.eye(contributions.shape[-1], dtype=contributions.dtype)
    for layer, matrix in enumerate(contributions):
        product = matrix @ product
        out[layer] = product
    return out


def _score(model: PreTrainedModel, captured: Captured) -> np.ndarray:
    contributions = [alti_layer(s.probs, s.transformed, s.hidden, s.out_proj, s.layer_norm)
                     for s in sublayers(model, captured)]
    return as_scores(aggregate(torch.stack(contributions)))


METHOD = Method("alti", frozenset({"model", "captured"}), _score)
