"""Gradient-based token interactions: self-attention attribution (Hao, Dong, Wei & Xu 2021,
"Self-Attention Attribution: Interpreting Information Interactions Inside Transformer", AAAI)
read from the dumps, and its one-node shortcut, attention × gradient.

F is the probability of the class the dump attributed (`target`). Head-summed, per layer l:

    AttAttr              a^l_ij = Σ_h A^l_h,ij ∫_0^1 ∂F(α A^l)/∂A^l_h,ij dα
                         (attnlab.engine.attribution)
    attention × gradient g^l_ij = Σ_h A^l_h,ij ∂F(A^l)/∂A^l_h,ij               (α = 1 only)

A dump keeps the full matrices only with attribution.keep_full; otherwise it keeps every edge
i ≠ j above a floor (attnlab.data.dumps). Edges it did not keep are below every kept one of their
layer, so they are scored −∞ here: tied with each other, below every kept edge — the rank of
a kept edge is exact, that of an unkept one the middle of the tied block.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured, target_probability
from attnlab.engine.intervention import Intervention


def attattr_from_dump(row: pd.Series, n_layers: int, n_heads: int) -> np.ndarray:
    """a^l_ij of one dump row as (L, n, n); −∞ where the dump kept no edge (and on the
    diagonal, which it never keeps) unless it holds the full matrices."""
    n = int(row["n_tokens"])
    full = row.get("attr_full")
    if full is not None and len(full):
        return np.asarray(full, dtype=np.float64).reshape(n_layers, n_heads, n, n).sum(axis=1)
    scores = np.full((n_layers, n, n), -np.inf)
    scores[np.asarray(row["edge_layer"], dtype=int), np.asarray(row["edge_i"], dtype=int),
           np.asarray(row["edge_j"], dtype=int)] = row["edge_score"]
    return scores


def attention_x_gradient(model: PreTrainedModel, example: Captured) -> torch.Tensor:
    """g^l_ij of every layer, as (L, n, n): one forward and backward pass per layer."""
    out = []
    for layer in range(example.probs.shape[0]):
        intervention = Intervention(scale_layer=layer,
                                    scale=torch.ones(1, device=example.probs.device))
        with torch.enable_grad():
            f = target_probability(models.logits(model, example.inputs, intervention),
                                   example.target)
            (grad,) = torch.autograd.grad(f.sum(), intervention.scaled)
        out.append((intervention.scaled.detach() * grad)[0].sum(dim=0))
    return torch.stack(out)
