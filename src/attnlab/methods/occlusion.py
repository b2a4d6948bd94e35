"""Edge occlusion, the brute-force baseline: the drop of F when one attention edge is zeroed
in every head (attnlab.methods.edge_masking),

    O^l_ij = F(A) − F(A with edge i → j of layer l zeroed)   (i ≠ j; O^l_ii = 0)

n(n−1) forward copies per layer and example; a decoder's n(n−1)/2, its edges i > j (the
others are not in its causal attention: O = 0).

Where the head reads one position of the last layer (every family but BART's classifier,
whose decoder reads every encoder position), each copy runs only what can change: zeroing
edge i → j changes only query i's row of layer l's output, so layer l runs that row alone
(attending to the layer's keys and values); the layers above run every row; and the last
layer runs only the classified row (attending to the keys and values of every row). An edge
of the last layer off the classified row changes nothing the head reads: its O is exactly 0.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured, target_probability
from attnlab.engine.intervention import Intervention
from attnlab.methods.edge_masking import masked_probabilities, off_diagonal
from attnlab.methods.method import Method, as_scores


def occlusion(model: PreTrainedModel, example: Captured, batch_size: int) -> torch.Tensor:
    """O^l_ij of every layer, as (L, n, n)."""
    n, layers = example.n_tokens, example.probs.shape[0]
    family = models.family_of(model)
    edges = off_diagonal(n, family.causal)
    scores = torch.zeros(layers, n * n)
    if not family.split:  # BART's classifier: every copy through the whole model
        keep = torch.ones(len(edges), n * n, device=example.probs.device)
        keep[torch.arange(len(edges)), edges] = 0
        for layer in range(layers):
            masked = masked_probabilities(model, example, {layer: keep.view(-1, n, n)},
                                          batch_size)
            scores[layer, edges] = example.f_full - masked[:, example.target].cpu()
        return scores.view(-1, n, n)
    read = edges[edges // n == models.classified_position(model, n)]
    for layer in range(layers):
        chosen = edges if layer < layers - 1 else read
        scores[layer, chosen] = example.f_full - _occluded(model, example, layer, chosen,
                                                           batch_size).cpu()
    return scores.view(-1, n, n)


def _occluded(model: PreTrainedModel, example: Captured, layer: int, edges: torch.Tensor,
              batch_size: int) -> torch.Tensor:
    """F with each edge of `edges` (flat indices i·n + j) of `layer` zeroed, as (E,), run from
    the layer's cached input through only the rows that can change (the module's docstring)."""
    n, last = example.n_tokens, example.probs.shape[0] - 1
    device = example.probs.device
    state = example.states[layer]
    context = models.layer_inputs(model, state, torch.ones(1, n, dtype=torch.long,
                                                           device=device))
    attended = models.attended(model, state, context, layer)
    classified = models.classified_position(model, n)
    out = []
    with torch.no_grad():
        for chunk in edges.to(device).split(batch_size):
            copies, queries = torch.arange(len(chunk), device=device), chunk // n
            keep = torch.ones(len(chunk), 1, 1, n, device=device)
            keep[copies, 0, 0, chunk % n] = 0
            rows = _rows(model, state[0, queries, None], context, layer, queries, attended,
                         keep)
            if layer < last:
                hidden = example.states[layer + 1].repeat(len(chunk), 1, 1)
                hidden[copies, queries] = rows[:, 0]
                hidden = models.run_layers(model, hidden, context, layer + 1, last)
                rows = _rows(model, hidden[:, classified, None], context, last,
                             torch.full_like(queries, classified),
                             models.attended(model, hidden, context, last))
            ones = torch.ones(len(chunk), 1, dtype=torch.long, device=device)
            out.append(target_probability(models.classify(model, rows, ones), example.target))
    return torch.cat(out)


def _rows(model: PreTrainedModel, rows: torch.Tensor, context: models.LayerInputs, layer: int,
          queries: torch.Tensor, attended: tuple[torch.Tensor, torch.Tensor],
          keep: torch.Tensor | None = None) -> torch.Tensor:
    """Layer `layer`'s output (C, 1, d) at query position queries[c] of copy c, from that
    row's input `rows` (C, 1, d), its queries attending to the keys and values `attended`;
    `keep` (C, 1, 1, n): the row's edges multiplied by it (0 = zeroed) in every head."""
    intervention = Intervention(attended={layer: attended},
                                edge_mask={} if keep is None else {layer: keep})
    return models.run_layers(model, rows, context.at(queries[:, None]), layer, layer + 1,
                             intervention)


def _score(model: PreTrainedModel, captured: Captured, batch_size: int) -> np.ndarray:
    return as_scores(occlusion(model, captured, batch_size))


METHOD = Method("occlusion", frozenset({"model", "captured", "batch_size"}), _score,
                target=True)
