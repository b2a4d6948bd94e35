"""Edge occlusion, the brute-force baseline: the drop of F when one attention edge is zeroed
in every head (attnlab.methods.edge_masking),

    O^l_ij = F(A) − F(A with edge i → j of layer l zeroed)   (i ≠ j; O^l_ii = 0)

n(n−1) forward copies per layer and example; a decoder's n(n−1)/2, its edges i > j (the
others are not in its causal attention: O = 0).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured
from attnlab.methods.edge_masking import masked_probabilities, off_diagonal
from attnlab.methods.method import Method, as_scores


def occlusion(model: PreTrainedModel, example: Captured, batch_size: int) -> torch.Tensor:
    """O^l_ij of every layer, as (L, n, n)."""
    n = example.n_tokens
    edges = off_diagonal(n, models.family_of(model).causal)
    keep = torch.ones(len(edges), n * n, device=example.probs.device)
    keep[torch.arange(len(edges)), edges] = 0
    keep = keep.view(-1, n, n)
    scores = torch.zeros(example.probs.shape[0], n * n)
    for layer in range(example.probs.shape[0]):
        masked = masked_probabilities(model, example, {layer: keep}, batch_size)
        scores[layer, edges] = example.f_full - masked[:, example.target].cpu()
    return scores.view(-1, n, n)


def _score(model: PreTrainedModel, captured: Captured, batch_size: int) -> np.ndarray:
    return as_scores(occlusion(model, captured, batch_size))


METHOD = Method("occlusion", frozenset({"model", "captured", "batch_size"}), _score)
