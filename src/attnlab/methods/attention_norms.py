"""Norm-based token interactions: attention-norm (Kobayashi et al. 2020, "Attention is Not
Only a Weight: Analyzing Transformers with Vector Norms", EMNLP) and ALTI (Ferrando, Gállego &
Costa-jussà 2022, "Measuring the Mixing of Contextual Information in the Transformer", EMNLP).

Layer l's attention sublayer computes, for query position i (head h, value vector v^h_j of
key j, output projection W_O = [W_O^1 ... W_O^H] with bias b_O, layer input x),

    a_i = Σ_j Σ_h α^h_ij f^h(x_j) + b_O,      f^h(x_j) = v^h_j W_O^h

(the value bias is inside v^h_j; b_O belongs to no token). Every family here is post-LN:
the sublayer's output is LN(z_i) with z_i = a_i + x_i.

attention-norm   N^l_ij = ‖Σ_h α^h_ij f^h(x_j)‖₂: attention weighted by the size of what the
                 key contributes. Equal to α_ij·c when there is one head and every ‖f(x_j)‖ = c.
ALTI             split z_i into per-token parts z_ij = Σ_h α^h_ij f^h(x_j) + [i = j] x_i (the
                 residual belongs to the token itself). LN is linear once its scale σ_i =
                 sqrt(Var(z_i) + ε) is fixed, so LN(z_i) = Σ_j T_ij + (bias terms) with
                 T_ij = γ ⊙ (z_ij − mean(z_ij)) / σ_i. With y_i = Σ_j T_ij (the bias terms
                 left out: they belong to no token), the layer-wise contribution is
                 c^l_ij = max(0, ‖y_i‖₁ − ‖y_i − T_ij‖₁), normalised so Σ_j C^l_ij = 1, and
                 ALTI aggregates the layers as rollout does (the residual is already inside):
                 ALTI^0 = C^0, ALTI^l = C^l ALTI^{l−1}. The feed-forward sublayer is not
                 decomposed (as in the paper).
"""

from __future__ import annotations

import torch
from torch import nn


def transformed_values(values: torch.Tensor, out_proj: nn.Linear) -> torch.Tensor:
    """f^h(x_j) = v^h_j W_O^h of (H, n, d_v) value vectors, as (H, n, d)."""
    n_heads, _, d_v = values.shape
    # nn.Linear's weight is (d, H·d_v); head h reads columns h·d_v .. (h+1)·d_v − 1
    weight = out_proj.weight.view(-1, n_heads, d_v)
    return torch.einsum("hnk,dhk->hnd", values, weight.to(values))


def head_parts(probs: torch.Tensor, transformed: torch.Tensor) -> torch.Tensor:
    """Σ_h α^h_ij f^h(x_j) of (H, n, n) probabilities and (H, n, d) f(x), as (n, n, d)."""
    return torch.einsum("hij,hjd->ijd", probs, transformed)


def attention_norm(probs: torch.Tensor, transformed: torch.Tensor) -> torch.Tensor:
    """N_ij = ‖Σ_h α^h_ij f^h(x_j)‖ as (n, n)."""
    return head_parts(probs, transformed).norm(dim=-1)


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
