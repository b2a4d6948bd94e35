"""Attribution trees (Hao et al. 2021 §5, Algorithm 1; docs/methods.md): how information flows
from the input tokens up to [CLS], read from the attribution dumps.

Per layer l, the head-summed attribution a^l = Σ_h Attr_h(A^l) is divided by a reference
maximum (`normalise`: "layer", the paper's maximum of the whole matrix, or "no_cls", the
official code's maximum over the query rows other than [CLS]) and the edges
E^l = {(i, j): i ≠ j, a^l_ij / max > τ} are kept (none when the maximum is not positive).
An edge (i, j) means query i reads key j: information flows from j up to i.

The tree is built top-down. Every token starts NotAppear. The top node is the non-[CLS] token
with the largest total attribution to the tokens it reads (Σ_l Σ_{j≠i} a^l_ij); it Appears.
Then for l = L−2 … 0 (0-based: the last layer feeds [CLS], the root) and each kept edge (i, j)
of layer l in row-major order (as the official code scans them, so equal scores need no tie
rule): if i Appears and j NotAppears, the edge is added, i becomes Fixed and j Appears; if i
is Fixed and j NotAppears, the edge is added and j Appears. Finally the root [CLS] is
connected to every node of the tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from attnlab.plumbing.errors import ConfigError

NOT_APPEAR, APPEAR, FIXED = 0, 1, 2
# The dump column holding each normalisation's reference maximum, per layer.
NORMALISATIONS = {"layer": "layer_max", "no_cls": "layer_max_no_cls"}
ROOT = 0  # [CLS]

# One kept edge: (query i, key j, normalised score a^l_ij / max).
Edge = tuple[int, int, float]


@dataclass
class Tree:
    """An attribution tree: its nodes in the order they appeared (the top node first) and its
    flow edges (layer, parent i, child j, normalised score) in the order they were added."""

    top: int | None
    nodes: list[int] = field(default_factory=list)
    edges: list[tuple[int, int, int, float]] = field(default_factory=list)

    def root_edges(self) -> list[tuple[int, int]]:
        """([CLS], j) for every node j of the tree other than [CLS] itself."""
        return [(ROOT, j) for j in self.nodes if j != ROOT]

    def joins(self, a: int, b: int) -> bool:
        """Whether a flow edge joins positions a and b (either direction)."""
        return any({i, j} == {a, b} for _, i, j, _ in self.edges)


def _check(tau: float, normalise: str) -> None:
    if not 0 < tau < 1:
        raise ConfigError(f"trees.tau: {tau} is out of range (allowed: > 0 and < 1)")
    if normalise not in NORMALISATIONS:
        raise ConfigError(f"trees.normalise: {normalise!r} is not one of "
                         f"{', '.join(NORMALISATIONS)}")


def kept_edges_from_matrix(layers: np.ndarray, tau: float, normalise: str) -> list[list[Edge]]:
    """E^l of every layer of head-summed attribution matrices `layers` (L, n, n), each edge
    list in row-major order."""
    _check(tau, normalise)
    kept = []
    for a in np.asarray(layers, dtype=np.float64):
        reference = a.max() if normalise == "layer" else a[1:].max(initial=-np.inf)
        if not reference > 0:
            kept.append([])
            continue
        ratio = a / reference
        np.fill_diagonal(ratio, -np.inf)
        kept.append([(int(i), int(j), float(ratio[i, j])) for i, j in np.argwhere(ratio > tau)])
    return kept


def kept_edges_from_dump(row: pd.Series | dict, n_layers: int, tau: float,
                         normalise: str) -> list[list[Edge]]:
    """E^l of every layer from a dump row's stored edges (complete unless
    `incomplete_layers` names the layer)."""
    _check(tau, normalise)
    reference = np.asarray(row[NORMALISATIONS[normalise]], dtype=np.float64)
    kept: list[list[Edge]] = [[] for _ in range(n_layers)]
    for layer, i, j, score in zip(row["edge_layer"], row["edge_i"], row["edge_j"],
                                  row["edge_score"], strict=True):
        if reference[layer] > 0 and score / reference[layer] > tau:
            kept[layer].append((int(i), int(j), float(score / reference[layer])))
    for edges in kept:
        edges.sort()  # row-major, as the matrix is scanned
    return kept


def incomplete_layers(row: pd.Series | dict, n_layers: int, tau: float,
                      normalise: str) -> list[int]:
    """The layers the tree scans (all but the last, which feeds the root) whose stored edges
    may miss some above tau: the dump keeps every edge above edge_floor[l], which is above
    tau x max only where attribution.max_edges_per_layer cut the edges (or where
    attribution.edge_min_fraction exceeds tau)."""
    reference = np.asarray(row[NORMALISATIONS[normalise]], dtype=np.float64)
    floor = np.asarray(row["edge_floor"], dtype=np.float64)
    return [layer for layer in range(n_layers - 1)
            if reference[layer] > 0 and tau * reference[layer] < floor[layer]]


def top_node(totals: np.ndarray) -> int | None:
    """The non-[CLS] position with the largest total (the first one on ties)."""
    totals = np.asarray(totals, dtype=np.float64)
    return int(np.argmax(totals[1:])) + 1 if len(totals) > 1 else None


def build_tree(kept: list[list[Edge]], top: int | None, n_tokens: int) -> Tree:
    """Algorithm 1 on the kept edges of every layer (see the module docstring)."""
    if top is None:
        return Tree(top=None)
    state = [NOT_APPEAR] * n_tokens
    state[top] = APPEAR
    tree = Tree(top=top, nodes=[top])
    for layer in range(len(kept) - 2, -1, -1):
        for i, j, score in kept[layer]:
            if i == j or state[j] != NOT_APPEAR or state[i] == NOT_APPEAR:
                continue
            state[i] = FIXED
            state[j] = APPEAR
            tree.nodes.append(j)
            tree.edges.append((layer, i, j, score))
    return tree


def tree_from_matrix(layers: np.ndarray, tau: float, normalise: str) -> Tree:
    """The tree of one example from its head-summed attribution matrices (L, n, n)."""
    layers = np.asarray(layers, dtype=np.float64)
    off_diagonal = layers.sum(axis=2) - np.diagonal(layers, axis1=1, axis2=2)
    return build_tree(kept_edges_from_matrix(layers, tau, normalise),
                      top_node(off_diagonal.sum(axis=0)), layers.shape[-1])


def tree_from_dump(row: pd.Series | dict, n_layers: int, tau: float, normalise: str) -> Tree:
    """The tree of one example from its dump row (stored edges and row sums)."""
    n = int(row["n_tokens"])
    totals = np.asarray(row["row_sum"], dtype=np.float64).reshape(n_layers, n).sum(axis=0)
    return build_tree(kept_edges_from_dump(row, n_layers, tau, normalise), top_node(totals), n)


def planted_pair(row: pd.Series) -> tuple[int, int] | None:
    """The token positions of a dump row's planted pair (None for real data)."""
    if pd.isna(row["planted_i"]) or pd.isna(row["planted_j"]):
        return None
    return int(row["planted_i"]), int(row["planted_j"])


def sample_examples(available: list[int], n: int, chosen: list[int], seed: int) -> list[int]:
    """The examples to render: `chosen` (dataset idx values; each must be available) and `n`
    others drawn with `seed`, in dataset order."""
    missing = sorted(set(chosen) - set(available))
    if missing:
        raise ConfigError(f"trees.example_idx: {missing} are not attributed dev examples "
                         f"(idx {min(available)}..{max(available)})")
    rest = [i for i in available if i not in set(chosen)]
    drawn = np.random.default_rng(seed).choice(len(rest), size=min(n, len(rest)), replace=False)
    picked = set(chosen) | {rest[k] for k in drawn}
    return [i for i in available if i in picked]
