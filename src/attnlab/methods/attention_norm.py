"""Attention-norm (Kobayashi, Kuribayashi, Yokoi & Inui 2020, "Attention is Not Only a Weight:
Analyzing Transformers with Vector Norms", EMNLP).

In the notation of attnlab.methods.sublayer_parts,

    N^l_ij = ‖Σ_h α^h_ij f^h(x_j)‖₂

attention weighted by the size of what the key contributes. Equal to α_ij·c when there is one
head and every ‖f(x_j)‖ = c.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured
from attnlab.methods.method import as_scores
from attnlab.methods.sublayer_parts import head_parts, transformed_values


def attention_norm(probs: torch.Tensor, transformed: torch.Tensor) -> torch.Tensor:
    """N_ij = ‖Σ_h α^h_ij f^h(x_j)‖ as (n, n)."""
    return head_parts(probs, transformed).norm(dim=-1)


def score(model: PreTrainedModel, captured: Captured) -> np.ndarray:
    # no layer norm is involved: the same for a post-LN encoder and a pre-LN decoder, whose
    # captured values already come from its normalised input
    weights = [models.output_projection(model, layer)[0] for layer in range(len(captured.probs))]
    return as_scores(torch.stack([
        attention_norm(probs, transformed_values(values, weight))
        for probs, values, weight in zip(captured.probs, captured.values, weights, strict=True)]))
