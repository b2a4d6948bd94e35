"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL).

With Ã^l the residual attention of layer l (attnlab.methods.attention_graph): the layered
graph with nodes (m, k), m = 0..L (m = 0: the input tokens; (m+1, k): position k after layer
m) and an edge (m, j) → (m+1, i) of capacity Ã^m_ij;

    F^l_ij = the maximum flow from (0, j) to (l+1, i).

Flow treats the attention weights as capacities, so a path is worth its narrowest edge. It is
costly: L·n² maximum-flow problems per example (networkx's shortest-augmenting-path algorithm,
on a residual network built once per layer and reused).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
from networkx.algorithms.flow import build_residual_network, shortest_augmenting_path

from attnlab.methods.attention_graph import residual_attention
from attnlab.methods.method import Method


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


METHOD = Method("flow", frozenset({"attention"}), flow)
