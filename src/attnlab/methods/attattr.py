"""Self-attention attribution (Hao, Dong, Wei & Xu 2021, "Self-Attention Attribution:
Interpreting Information Interactions Inside Transformer", AAAI), read from the dumps.

F is the probability of the class the dump attributed (`target`). Head-summed, per layer l:

    a^l_ij = Σ_h A^l_h,ij ∫_0^1 ∂F(α A^l)/∂A^l_h,ij dα      (attnlab.engine.attribution)

A dump keeps the full matrices only with attribution.keep_full; otherwise it keeps every edge
i ≠ j above a floor (attnlab.data.dumps). Edges it did not keep are below every kept one of their
layer, so they are scored −∞ here: tied with each other, below every kept edge — the rank of
a kept edge is exact, that of an unkept one the middle of the tied block.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlab.methods.method import DumpRow, Method


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


def _score(dump: DumpRow) -> np.ndarray:
    return attattr_from_dump(dump.row, dump.n_layers, dump.n_heads)


# computed by rule attribute: its time is that rule's
METHOD = Method("attattr", frozenset({"dump"}), _score, timed=False)
