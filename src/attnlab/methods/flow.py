"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL).

With Ã^l the residual attention of layer l (attnlab.methods.attention_graph): the layered
graph with nodes (m, k), m = 0..L (m = 0: the input tokens; (m+1, k): position k after layer
m) and an edge (m, j) → (m+1, i) of capacity Ã^m_ij; the maximum flow

    M^l_ij = the maximum flow from (0, j) to (l+1, i),

normalised, as the authors' code does (`compute_flows` of samiraabnar/attention_flow), so that
each output node's flows sum to 1:

    F^l_ij = M^l_ij / Σ_k M^l_ik.

`normalised=False` keeps M (attnlab's first version; docs/methods.md). Flow treats the
attention weights as capacities, so a path is worth its narrowest edge.

It costs L·n² maximum-flow problems per example. They are solved by SciPy's compiled
`maximum_flow` (Dinic's algorithm), which needs integer capacities: Ã is scaled by 2^30 and
rounded. Every capacity is at most 1 and the flow into a sink at most Σ_j Ã^l_ij = 1, so no
value exceeds 2^30 (SciPy computes in 32 bits); a cut of k edges moves by at most k/2 units of
2^−30 in the rounding, so M is within E·2^−31 of the exact value, E = l·n² the graph's edges
(under 1e−5 for 12 layers of 128 tokens).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from attnlab.methods.attention_graph import residual_attention
from attnlab.methods.method import Variants

SCALE = 2**30  # integer units per unit of capacity


def _layered_graph(mixed: np.ndarray, layers: int) -> csr_matrix:
    """Layers 0..layers−1 of Ã as a capacity matrix in integer units: node m·n + k is (m, k),
    the edge (m, j) → (m+1, i) is entry [m·n + j, (m+1)·n + i]."""
    n = mixed.shape[-1]
    size = (layers + 1) * n
    m, i, j = np.meshgrid(np.arange(layers), np.arange(n), np.arange(n), indexing="ij")
    capacity = np.rint(mixed[:layers] * SCALE).astype(np.int32).ravel()
    return csr_matrix((capacity, ((m * n + j).ravel(), ((m + 1) * n + i).ravel())),
                      shape=(size, size))


def max_flows(attention: np.ndarray) -> np.ndarray:
    """M^l_ij of (L, n, n) head-mean attention, unnormalised (see the module docstring)."""
    mixed = residual_attention(attention)
    n_layers, n, _ = mixed.shape
    out = np.zeros_like(mixed)
    for layer in range(n_layers):
        # the graph up to layer l only: nodes above the sink cannot carry flow back to it
        graph = _layered_graph(mixed, layer + 1)
        for i in range(n):
            for j in range(n):
                result = maximum_flow(graph, j, (layer + 1) * n + i, method="dinic")
                out[layer, i, j] = result.flow_value / SCALE
    return out


def flow(attention: np.ndarray, *, normalised: bool = True) -> np.ndarray:
    """Attention flow of (L, n, n) head-mean attention: F (each output node's flows summing to
    1, as the authors compute it), or M with `normalised=False`."""
    flows = max_flows(attention)
    if not normalised:
        return flows
    return flows / flows.sum(axis=-1, keepdims=True)


def score(attention: np.ndarray, variants: Variants) -> np.ndarray:
    return flow(attention, normalised=variants.flow_normalised)
