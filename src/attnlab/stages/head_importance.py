"""Rule head_importance (Hao et al. 2021 §4): every head of a task's model scored by each
configured method on the first attributed dev examples (the rest of the dev split, disjoint
from them, evaluates global pruning: `heads.evaluation_split`)."""

from __future__ import annotations

import logging

from attnlab.analyses.heads import evaluation_split, importance_table, ranking_scores
from attnlab.data.dumps import attributed_head_scores
from attnlab.engine import models
from attnlab.model_job import ModelJob

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the table importance (task, method, seed, layer, head, importance; the number of
    examples beside the job's provenance)."""
    cfg = job.settings.heads
    scores = attributed_head_scores(job.paths("parts"), job.split("dev"),
                                    head_shape=models.head_shape(job.model),
                                    target=job.settings.attribution.target)
    dev = job.encoded("dev")
    n = evaluation_split(len(dev["labels"]), len(scores["attribution"]),
                         importance_examples=cfg.importance_examples,
                         min_evaluation=cfg.min_evaluation_examples, task=job.task)
    inputs = {k: v[:n] for k, v in dev.items()}
    scores = ranking_scores(job.model, inputs, {name: array[:n] for name, array in scores.items()},
                            cfg.batch_size)
    log.info("task %s: head importance by %s over %d examples", job.task,
             ", ".join(cfg.methods), n)
    table = importance_table(job.model, inputs, scores, list(cfg.methods), cfg.random_seeds,
                             job.settings.seed, cfg.batch_size)
    job.write_tables({"importance": table}, meta={"examples": n})
