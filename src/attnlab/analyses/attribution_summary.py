"""A task's attribution dump in numbers (accuracy, completeness error, gradient evaluations,
size, planted-pair recovery on synthetic tasks), and the ground-truth findings judged on the
planted-pair recovery.

The ground-truth rows are findings, not checks: nothing in the construction makes the strongest
attribution edge join the planted pair; the model has to have learned that the pair decides the
label (an untrained model's attributions need not find it). They are our validation, on planted
tasks, of two statements of Hao et al. (§1): AttAttr identifies the important attention
connections of a layer, and attention weights do not always agree with what contributes to the
prediction. Each is a statistic of per-example hits (0/1) over the examples a planted pair
decides: the share with its Wilson interval, attribution against attention a paired bootstrap
interval (the same examples).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlab.analyses import verdicts
from attnlab.analyses.claims import finding, source
from attnlab.analyses.verdicts import Bar
from attnlab.data.dumps import (
    RELATIVE_FLOOR,
    completeness_errors,
    read_task_dump,
    within_tolerance,
)
from attnlab.data.groundtruth import planted_pair_recovery
from attnlab.plumbing.errors import AttnlabError

QUANTILES = ("median", "p90", "p99", "max")


def _quantiles(values: np.ndarray) -> dict[str, float]:
    return {"median": float(np.median(values)), "p90": float(np.quantile(values, 0.9)),
            "p99": float(np.quantile(values, 0.99)), "max": float(values.max())}


def read_checked_dump(shard_paths: list[str | os.PathLike], n_shards: int) -> pd.DataFrame:
    """A task's dump gathered from its shards, checked against the configured shard count."""
    dump, meta = read_task_dump(shard_paths)
    if meta["n_shards"] != n_shards:
        raise AttnlabError(f"attribution dumps were written for {meta['n_shards']} shards, the "
                         f"config asks for {n_shards} (rerun attribute)")
    return dump


def summarise_task(dump: pd.DataFrame, shard_paths: list[str | os.PathLike], *,
                   tolerance: float) -> dict[str, Any]:
    """Summarise a task's dump (`read_checked_dump`), read from `shard_paths`.

    Reports accuracy, the completeness error of the attributions: absolute, in units of F, as
    `tolerance` bounds it (and the share of (example, layer) pairs within it), and relative to
    the change F(A) − F(0·A^l) only over the pairs where it is at least RELATIVE_FLOOR (stated
    beside it, with the count of pairs below it); the gradient evaluations they took, the dump
    size per example and, for synthetic tasks, how often attribution and raw attention find
    the planted pair.
    """
    # The relative error explodes on layers whose removal barely moves F (saturated models):
    # it is taken above a stated floor of the change only.
    _, absolute, relative = completeness_errors(dump)
    within = within_tolerance(absolute, tolerance)
    moved = relative[~np.isnan(relative)]
    nodes = np.stack(dump["grad_nodes"].to_numpy())
    return {
        "examples": len(dump),
        "accuracy": float((dump["pred"] == dump["label"]).mean()),
        "completeness_abs_error": _quantiles(absolute),
        "completeness_rel_error": {
            **(_quantiles(moved) if moved.size else dict.fromkeys(QUANTILES)),
            "change_floor": RELATIVE_FLOOR, "pairs": int(moved.size),
            "pairs_below_floor": int(relative.size - moved.size)},
        "tolerance": tolerance,
        "within_tolerance": float(within.mean()),
        "outside_tolerance": int((~within).sum()),
        "grad_nodes": {"mean": float(nodes.mean()), **_quantiles(nodes)},
        "bytes_per_example": sum(Path(p).stat().st_size for p in shard_paths) / len(dump),
        "planted_pair_recovery": planted_pair_recovery(dump),
    }


# The bars of the ground-truth findings, our choice (the acceptance bars of issue #4; the paper
# has no planted tasks). A tie between attribution and attention is a difference within
# TIE_MARGIN: on seed 0 raw attention finds the pair as often as attribution on syn_rte and
# syn_sst2 (within 0.04 either way; docs/replication.md has the measurements).
RECOVERY_BAR = 0.8
TIE_MARGIN = 0.1


def recovery_claims(hits: pd.DataFrame) -> list[dict[str, Any]]:
    """The ground-truth findings of a task's per-example planted-pair hits
    (`groundtruth.planted_pair_hits`): attribution finds the pair in most examples, at least as
    often as raw attention (a tie within TIE_MARGIN counts) and clearly more often (by
    TIE_MARGIN). None where the task has no planted pairs."""
    if hits.empty:
        return []
    stage, n = "ground_truth", len(hits)
    by_attribution = hits["attribution"].to_numpy(dtype=float)
    lead = verdicts.difference(by_attribution, hits["attention"].to_numpy(dtype=float),
                               paired=True, scale=verdicts.SIGNED_UNIT)
    difference = (f"share of the {n} examples a planted pair decides whose strongest edge of "
                  f"some layer joins it, attribution minus raw attention, paired 95 % interval "
                  f"over the examples")
    return [
        finding(stage, "the strongest attribution edge of some layer joins the planted pair",
                f"share of the {n} examples a planted pair decides, 95 % Wilson interval over "
                f"the examples (holds above {RECOVERY_BAR}; bar: our choice, the paper has no "
                f"planted tasks)",
                verdicts.share(by_attribution), Bar(RECOVERY_BAR),
                source("hao2021", "connections")),
        finding(stage, "attribution finds the planted pair at least as often as attention",
                f"{difference} (holds above -{TIE_MARGIN}: a tie counts; bar: our choice)",
                lead, Bar(-TIE_MARGIN), source("hao2021", "attention_differs")),
        finding(stage, "attribution finds the planted pair clearly more often than attention",
                f"{difference} (holds above {TIE_MARGIN}; bar: our choice)",
                lead, Bar(TIE_MARGIN), source("hao2021", "attention_differs")),
    ]
