"""Checks of attributions against the planted ground truth of the synthetic tasks."""

from __future__ import annotations

from typing import Any

import pandas as pd

from attnlab.analyses.claims import claim


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


# The bars of the ground-truth claims. The shares move between CPUs (float training takes
# another path on another CPU) and between seeds, so "wins" and "ties" are judged with a margin,
# never by a strict `>`: on seed 0 raw attention finds the pair as often as attribution on
# syn_rte and syn_sst2 (within 0.04 either way), which is a tie, not a loss
# (docs/replication.md has the measurements).
RECOVERY_BAR = 0.8
TIE_MARGIN = 0.1


def recovery_claims(recovery: dict[str, float | int]) -> list[dict[str, Any]]:
    """The ground-truth claims of a task's planted-pair recovery (planted_pair_recovery): that
    attribution finds the pair in most examples, at least as often as raw attention (a tie
    within TIE_MARGIN counts), and clearly more often (by TIE_MARGIN). No claims where the task has
    no planted pairs."""
    if not recovery["examples"]:
        return []
    attribution, lead = recovery["attribution"], recovery["attribution"] - recovery["attention"]
    stage, n = "ground_truth", recovery["examples"]
    return [
        claim(stage, "the strongest attribution edge of some layer joins the planted pair",
              f"share of the {n} examples a planted pair decides; holds if >= {RECOVERY_BAR}",
              attribution, attribution >= RECOVERY_BAR),
        claim(stage, "attribution finds the planted pair at least as often as attention",
              f"attribution share - attention share; holds if >= -{TIE_MARGIN} (a tie counts)",
              lead, lead >= -TIE_MARGIN),
        claim(stage, "attribution finds the planted pair clearly more often than attention",
              f"attribution share - attention share; holds if >= {TIE_MARGIN}",
              lead, lead >= TIE_MARGIN),
    ]


def recovery_claims_table(recovery: dict[str, float | int], task: str) -> pd.DataFrame:
    """recovery_claims of task `task` as a claims table (no rows for a task without planted
    pairs)."""
    columns = ["task", "stage", "claim", "metric", "value", "verdict"]
    return pd.DataFrame([{"task": task, **row} for row in recovery_claims(recovery)],
                        columns=columns)
