"""Rule prune_eval (Hao et al. 2021 §4): a task's heads pruned without re-training, per layer
and globally, and the paper's statements judged on the curves."""

from __future__ import annotations

import logging

import pandas as pd

from attnlab.analyses import pruning
from attnlab.analyses.claims import log_claims
from attnlab.analyses.heads import ranking_scores
from attnlab.data.dumps import attributed_head_scores
from attnlab.engine import models
from attnlab.model_job import ModelJob

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the tables per_layer (curves on the attributed dev examples, which need their
    own attributions), global_ (curves on the whole dev split) and claims."""
    cfg = job.settings.heads
    scores = attributed_head_scores(job.paths("parts"), job.split("dev"),
                                    head_shape=models.head_shape(job.model),
                                    target=job.settings.attribution.target)
    inputs = job.encoded("dev")
    n_attributed = len(scores["attribution"])
    attributed = {k: v[:n_attributed] for k, v in inputs.items()}
    scores = ranking_scores(job.model, attributed, scores, cfg.batch_size)
    log.info("task %s: per-layer pruning on %d attributed examples", job.task, n_attributed)
    per_layer = pruning.per_layer_curves(job.model, attributed, scores, cfg.batch_size)
    importance = pd.read_parquet(job.inputs["importance"])
    log.info("task %s: global pruning on %d dev examples", job.task, len(inputs["labels"]))
    global_ = pruning.global_curves(job.model, inputs, importance, list(cfg.prune_percents),
                                    cfg.batch_size)
    claims = pd.DataFrame(pruning.per_layer_claims(per_layer) + pruning.global_claims(global_))
    job.write_tables({"per_layer": per_layer, "global_": global_, "claims": claims})
    log_claims(claims, job.task)
