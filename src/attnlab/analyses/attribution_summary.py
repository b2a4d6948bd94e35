"""Rule `summarise_attributions`: a task's attribution dump in numbers (accuracy, completeness
error, gradient evaluations, size, planted-pair recovery on synthetic tasks)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.data.dumps import completeness_errors, read_task_dump
from attnlab.data.groundtruth import planted_pair_recovery
from attnlab.plumbing.errors import AttnlabError


def _quantiles(values: np.ndarray) -> dict[str, float]:
    return {"median": float(np.median(values)), "p90": float(np.quantile(values, 0.9)),
            "p99": float(np.quantile(values, 0.99)), "max": float(values.max())}


def summarise_task(shard_paths: list[str | os.PathLike], n_shards: int, *,
                   tolerance: float) -> dict[str, Any]:
    """Gather a task's shards, check them against the configured shard count, summarise.

    Reports accuracy, the completeness error of the attributions (and the share of (example,
    layer) pairs within `tolerance`), the gradient evaluations they took, the dump size per
    example and, for synthetic tasks, how often attribution and raw attention find the
    planted pair.
    """
    dump, meta = read_task_dump(shard_paths)
    if meta["n_shards"] != n_shards:
        raise AttnlabError(f"attribution dumps were written for {meta['n_shards']} shards, the "
                         f"config asks for {n_shards} (rerun attribute)")
    # The relative error explodes on layers whose removal barely moves F (saturated models),
    # so the absolute error is reported beside it.
    _, absolute, relative = completeness_errors(dump)
    nodes = np.stack(dump["grad_nodes"].to_numpy())
    return {
        "examples": len(dump),
        "accuracy": float((dump["pred"] == dump["label"]).mean()),
        "completeness_error": _quantiles(relative),
        "completeness_abs_error": _quantiles(absolute),
        "tolerance": tolerance,
        "within_tolerance": float((absolute <= tolerance).mean()),
        "outside_tolerance": int((absolute > tolerance).sum()),
        "grad_nodes": {"mean": float(nodes.mean()), **_quantiles(nodes)},
        "bytes_per_example": sum(Path(p).stat().st_size for p in shard_paths) / len(dump),
        "planted_pair_recovery": planted_pair_recovery(dump),
    }
