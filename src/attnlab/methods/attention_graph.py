"""Attention read as a graph over token positions: raw attention, attention rollout and
attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL).

Every score here is indexed [l, i, j]: layer l (0-based), position i as a query of layer l
(equivalently, position i in layer l's output), position j as a key. Given the attention
probabilities A^l_h of the H heads of each layer, restricted to one example's n real tokens:

    raw attention  A^l = (1/H) Σ_h A^l_h                      (the head mean)
    residual       Ã^l = ½ A^l + ½ I                           (the residual connection as an
                                                                identity edge; rows sum to 1)
    rollout        R^0 = Ã^0,  R^l = Ã^l R^{l−1}               (R^l_ij: the share of input token
                                                                j in position i after layer l)
    flow           the layered graph with nodes (m, k), m = 0..L (m = 0: the input tokens;
                   (m+1, k): position k after layer m) and an edge (m, j) → (m+1, i) of
                   capacity Ã^m_ij; F^l_ij = the maximum flow from (0, j) to (l+1, i).

Rollout multiplies the layers' mixing as if it were linear; flow treats the attention weights
as capacities, so a path is worth its narrowest edge. Flow is costly: L·n² maximum-flow
problems per example (networkx's shortest-augmenting-path algorithm, on a residual network
built once per layer and reused).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
from networkx.algorithms.flow import build_residual_network, shortest_augmenting_path


def head_mean(probs: np.ndarray) -> np.ndarray:
    """Raw attention A^l = (1/H) Σ_h A^l_h of (L, H, n, n) probabilities, as (L, n, n)."""
    return probs.mean(axis=1)


def residual_attention(attention: np.ndarray) -> np.ndarray:
    """Ã^l = ½ A^l + ½ I of (L, n, n) head-mean attention."""
    return 0.5 * attention + 0.5 * np.eye(attention.shape[-1])


def rollout(attention: np.ndarray) -> np.ndarray:
    """Attention rollout R^l = Ã^l Ã^{l−1} ... Ã^0 of (L, n, n) head-mean attention."""
    mixed = residual_attention(attention)
    out = np.empty_like(mixed)
    product = np.eye(mixed.shape[-1])
    for layer, matrix in enumerate(mixed):
        product = matrix @ product
        out[layer] = product
    return out


def _layered_graph(mixed: np.ndarray, layers: int) -> nx.DiGraph:
    """The graph of layers 0..layers−1 of Ã: node m·n + k is (m, k)."""
    n = mixed.shape[-1]
    graph = nx.DiGraph()
    for m in range(layers):
        for i in range(n):
            for j in range(n):
                graph.add_edge(m * n + j, (m + 1) * n + i, capacity=float(mixed[m, i, j]))
    return graph


def flow(attention: np.ndarray) -> np.ndarray:
    """Attention flow F^l_ij of (L, n, n) head-mean attention (see the module docstring)."""
    mixed = residual_attention(attention)
    n_layers, n, _ = mixed.shape
    out = np.zeros_like(mixed)
    for layer in range(n_layers):
        # the graph up to layer l only: nodes above the sink cannot carry flow back to it
        graph = _layered_graph(mixed, layer + 1)
        residual = build_residual_network(graph, "capacity")
        for i in range(n):
            for j in range(n):
                # the algorithm resets the flows of the residual network it is given
                result = shortest_augmenting_path(graph, j, (layer + 1) * n + i,
                                                  residual=residual, value_only=True)
                out[layer, i, j] = result.graph["flow_value"]
    return out
