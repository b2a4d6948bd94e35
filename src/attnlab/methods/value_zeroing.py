"""Value zeroing (Mohebbi, Zuidema, Chrupała & Alishahi 2023, "Quantifying Context Mixing in
Transformers", EACL).

For layer l, let x̃_i be the output of the whole layer (attention and feed-forward sublayers)
at position i, and x̃_i^{¬j} the same output when the value vector of token j is zeroed in
every head of layer l. Then

    VZ^l_ij = 1 − cos(x̃_i^{¬j}, x̃_i),   normalised so that Σ_j VZ^l_ij = 1

(a row that no zeroing changes stays all zero). Since a head's output at i is Σ_k α_ik v_k,
zeroing v_j is zeroing column j of every head's probabilities: that is how it is done here,
through the intervention point (`Intervention.edge_mask`), for the n keys of a layer in one
batch of n copies started from the cached hidden state entering the layer.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn.functional import cosine_similarity
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured
from attnlab.engine.intervention import Intervention
from attnlab.methods.method import as_scores


def value_zeroing(model: PreTrainedModel, states: list[torch.Tensor]) -> torch.Tensor:
    """Unnormalised 1 − cos(x̃_i^{¬j}, x̃_i) per layer, as (L, n, n) [l, i, j], of one example
    without padding; `states` are its hidden states [e^0, ..., e^L], each (1, n, d)."""
    n = states[0].shape[1]
    copies = torch.ones(n, n, dtype=torch.long, device=states[0].device)
    keep = 1 - torch.eye(n, device=states[0].device)  # copy j: column j zeroed
    out = []
    for layer in range(len(states) - 1):
        hidden = states[layer].expand(n, -1, -1)
        context = models.layer_inputs(model, hidden, copies)
        zeroed = models.run_layers(model, hidden, context, layer, layer + 1,
                                   Intervention(edge_mask={layer: keep[:, None, None, :]}))
        # zeroed[j, i] is x̃_i^{¬j}: transpose to [i, j]
        distance = (1 - cosine_similarity(zeroed, states[layer + 1], dim=-1)).clamp_min(0)
        out.append(distance.T)
    return torch.stack(out)


def normalise_rows(scores: torch.Tensor) -> torch.Tensor:
    """Rows scaled to sum to 1 (an all-zero row stays zero)."""
    return scores / scores.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)


def score(model: PreTrainedModel, captured: Captured) -> np.ndarray:
    return as_scores(normalise_rows(value_zeroing(model, captured.states)))
