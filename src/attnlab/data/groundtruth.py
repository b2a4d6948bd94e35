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


def planted_pair_recovery(dump: pd.DataFrame) -> dict[str, float | int]:
    """Share of examples in which the strongest edge of some layer joins the planted pair,
    for head-summed attribution and, as the baseline, head-summed raw attention."""
    planted = dump.dropna(subset=["planted_i", "planted_j"])
    if planted.empty:
        return {"examples": 0, "attribution": float("nan"), "attention": float("nan")}
    by_attribution = by_attention = 0
    for _, row in planted.iterrows():
        a, b = row["planted_i"], row["planted_j"]
        by_attribution += any(_joins(i, j, a, b) for i, j in strongest_edges(row).values())
        by_attention += any(
            _joins(i, j, a, b) for i, j in zip(row["attn_top_i"], row["attn_top_j"], strict=True)
        )
    return {
        "examples": len(planted),
        "attribution": by_attribution / len(planted),
        "attention": by_attention / len(planted),
    }
