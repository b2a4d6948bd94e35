"""Checks of attributions against the planted ground truth of the synthetic tasks (the claims
judged on them: `attnlab.analyses.attribution_summary`)."""

from __future__ import annotations

import pandas as pd


def _joins(i: int, j: int, a: int, b: int) -> bool:
    return {int(i), int(j)} == {int(a), int(b)}


def strongest_edges(row: pd.Series) -> dict[int, tuple[int, int]]:
    """Per layer, the strongest off-diagonal head-summed attribution edge of a dump row
    (the dump stores each layer's edges strongest first)."""
    strongest: dict[int, tuple[int, int]] = {}
    for layer, i, j in zip(row["edge_layer"], row["edge_i"], row["edge_j"], strict=True):
        strongest.setdefault(int(layer), (int(i), int(j)))
    return strongest


def planted_pair_hits(dump: pd.DataFrame) -> pd.DataFrame:
    """Per example with a planted pair (idx): whether the strongest edge of some layer joins
    it, by head-summed attribution and, as the baseline, by head-summed raw attention."""
    rows = []
    for _, row in dump.dropna(subset=["planted_i", "planted_j"]).iterrows():
        a, b = row["planted_i"], row["planted_j"]
        rows.append({
            "idx": int(row["idx"]),
            "attribution": any(_joins(i, j, a, b) for i, j in strongest_edges(row).values()),
            "attention": any(_joins(i, j, a, b) for i, j in
                             zip(row["attn_top_i"], row["attn_top_j"], strict=True)),
        })
    return pd.DataFrame(rows, columns=["idx", "attribution", "attention"]).astype(
        {"attribution": bool, "attention": bool})


def planted_pair_recovery(dump: pd.DataFrame) -> dict[str, float | int]:
    """Share of examples in which the strongest edge of some layer joins the planted pair
    (`planted_pair_hits`), by attribution and by attention."""
    hits = planted_pair_hits(dump)
    if hits.empty:
        return {"examples": 0, "attribution": float("nan"), "attention": float("nan")}
    return {"examples": len(hits), "attribution": float(hits["attribution"].mean()),
            "attention": float(hits["attention"].mean())}
