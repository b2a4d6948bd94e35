"""Rule attribute: one shard of a task's dev split through the attribution engine into a dump
(`attnlab.data.dumps`, whose docstring lists the columns); the shards of all tasks form one
hive-partitioned Parquet dataset.

The first heads.importance_examples dev examples, those rule head_importance reads, go
through the engine apart from the rest (each part in its own batches): a task whose role reads
no more of its attributions (role correlation, `head_examples_only`) attributes only them, and
they come out to the bit as they do in a task attributed whole."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from attnlab.data.dumps import write_dump
from attnlab.engine.dump_rows import dump_rows
from attnlab.engine.models import head_shape
from attnlab.model_job import ModelJob

log = logging.getLogger(__name__)


def shard_rows(n_examples: int, shard: int, n_shards: int) -> range:
    """The contiguous block of example rows that shard `shard` of `n_shards` attributes."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} is outside 0..{n_shards - 1}")
    start = n_examples * shard // n_shards
    return range(start, n_examples * (shard + 1) // n_shards)


def run(job: ModelJob) -> None:
    """Writes the shard's dump `part` and its `summary` (examples, accuracy, largest absolute
    completeness error and the (example, layer) pairs outside the tolerance, rows per pass,
    bytes)."""
    attribution = job.settings.attribution
    shard, n_shards = int(job.wildcards["shard"]), attribution.shards
    dev = job.split("dev")
    if attribution.max_examples:
        dev = dev.iloc[: attribution.max_examples]
    block = shard_rows(len(dev), shard, n_shards)
    heads = job.settings.heads.importance_examples
    parts = [range(block.start, min(block.stop, heads))]
    if not job.settings.head_examples_only:
        parts.append(range(max(block.start, heads), block.stop))
    parts = [dev.iloc[list(part)].reset_index(drop=True) for part in parts if part]
    meta = {"top_pairs": attribution.top_pairs, "task": job.task, "shard": shard,
            "n_shards": n_shards, **job.provenance}
    path = job.outputs["part"]
    if not parts:
        # More shards than examples, or a shard past the examples head_importance reads: this
        # shard has none. Its dump is empty but complete, so that any attribution.shards works
        # with any dev split.
        log.warning("task %s shard %d/%d: no dev examples to attribute (attribution.shards is "
                    "more than the examples%s); the shard's dump is empty", job.task, shard,
                    n_shards, " head_importance reads" if job.settings.head_examples_only else "")
        n_layers, n_heads = head_shape(job.model)
        write_dump([], path, {"n_layers": n_layers, "n_heads": n_heads, **meta})
        job.write_json("summary", {
            "examples": 0, "accuracy": None, "completeness_abs_error_max": None,
            "outside_tolerance": 0, "bytes": Path(path).stat().st_size})
        return
    attributed = [dump_rows(job.model, job.tokenizer, part, job.spec, attribution,
                            job.settings.model, bf16=job.precision.bf16,
                            shard=(shard, n_shards)) for part in parts]
    rows = [row for part in attributed for row in part.rows]
    write_dump(rows, path,
               {"n_layers": attributed[0].n_layers, "n_heads": attributed[0].n_heads, **meta})
    job.write_json("summary", {
        "examples": len(rows),
        "accuracy": float(np.mean([r["pred"] == r["label"] for r in rows])),
        "completeness_abs_error_max": max(p.completeness_abs_error_max for p in attributed),
        "outside_tolerance": sum(p.outside_tolerance for p in attributed),
        "batch_size": max(p.batch_size for p in attributed),
        "bytes": Path(path).stat().st_size,
    })
