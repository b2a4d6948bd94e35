"""The class probabilities with attention edges zeroed: what occlusion
(attnlab.methods.occlusion) and the deletion curves of every method
(attnlab.analyses.interaction_eval) measure.

Zeroing edge i → j of layer l means A^l_h,ij = 0 in every head h, the rows not renormalised
(as Hao et al. scale attention), through the intervention point (`Intervention.edge_mask`).
Many edge-masked copies of one example run in one forward pass; for families that can start
from a cached hidden state, copies start at the lowest masked layer.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured
from attnlab.engine.intervention import Intervention


def masked_probabilities(
    model: PreTrainedModel,
    example: Captured,
    keep: dict[int, torch.Tensor],
    batch_size: int,
) -> torch.Tensor:
    """The class probabilities of C copies of `example`, copy c with layer l's edges
    multiplied by keep[l][c] ((C, n, n), 0 = zeroed, in every head), as (C, classes)."""
    copies = len(next(iter(keep.values())))
    start = min(keep) if models.family_of(model).split else None
    out = []
    with torch.no_grad():
        for first in range(0, copies, batch_size):
            rows = slice(first, first + batch_size)
            intervention = Intervention(
                edge_mask={layer: mask[rows, None] for layer, mask in keep.items()})
            count = len(range(copies)[rows])
            if start is None:
                inputs = {k: v.expand(count, -1) for k, v in example.inputs.items()}
                logits = models.logits(model, inputs, intervention)
            else:
                hidden = example.states[start].expand(count, -1, -1)
                ones = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
                context = models.layer_inputs(model, hidden, ones)
                hidden = models.run_layers(model, hidden, context, start, None, intervention)
                logits = models.classify(model, hidden, ones)
            out.append(torch.softmax(logits.float(), dim=-1))
    return torch.cat(out)


def off_diagonal(n: int, causal: bool = False) -> torch.Tensor:
    """The n(n−1) flat indices i·n + j with i ≠ j, in row-major order; `causal` (a decoder):
    the n(n−1)/2 with i > j only, since a query never attends to a later key (every method's
    score of such an edge is 0, and deleting it changes nothing)."""
    flat = torch.arange(n * n)
    return flat[flat // n > flat % n] if causal else flat[flat // n != flat % n]
