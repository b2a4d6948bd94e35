"""Rule summarise_attributions: gathers a task's attribution shards (fails unless every shard is
there), summarises the dump and judges the ground-truth findings of synthetic tasks."""

from __future__ import annotations

import logging

from attnlab.analyses.attribution_summary import (
    read_checked_dump,
    recovery_claims,
    summarise_task,
)
from attnlab.analyses.claims import claims_frame, on_models
from attnlab.data.groundtruth import planted_pair_hits
from attnlab.job import Job

log = logging.getLogger(__name__)


def run(job: Job) -> None:
    """Writes the JSON `summary` (accuracy, completeness error, gradient evaluations, bytes per
    example, planted-pair recovery) and the table `claims` (no rows for a task without planted
    pairs)."""
    attribution = job.settings.attribution
    dump = read_checked_dump(job.paths("parts"), attribution.shards)
    summary = summarise_task(dump, job.paths("parts"), tolerance=attribution.tolerance)
    log.info("task %s: %s", job.task, summary)
    job.write_json("summary", summary)
    claims = claims_frame(recovery_claims(planted_pair_hits(dump)))
    job.write_tables({"claims": on_models(claims, job.finetune_metrics)})
