"""Rule prune_eval (Hao et al. 2021 §4): a task's heads pruned without re-training, per layer
and globally, and the paper's statements judged on the curves as findings (with this
project's own on the per-layer curves: `pruning.per_layer_claims`)."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from attnlab.analyses import heads, pruning
from attnlab.analyses.claims import claims_frame, log_claims, on_models
from attnlab.data.dumps import attributed_head_scores
from attnlab.engine import examples, models
from attnlab.engine.attribution import engine_options
from attnlab.engine.batch_size import examples_per_call, rows_per_pass
from attnlab.model_job import ModelJob

log = logging.getLogger(__name__)


def _label_rankings(job: ModelJob, inputs: dict[str, torch.Tensor],
                    dumped: np.ndarray) -> dict[str, np.ndarray]:
    """The attributed examples' per-head maxima to their predicted and gold labels
    (`pruning.label_rankings`): the misclassified ones are attributed here to the label the
    dumps do not hold, with the run's attribution settings."""
    cfg = job.settings.heads
    predicted = examples.predict(job.model, inputs, batch_size=cfg.batch_size).argmax(-1)
    engine = engine_options(job.settings.attribution)
    engine["batch_size"] = rows_per_pass(job.model.config, engine, inputs["input_ids"].shape[1],
                                         job.device)

    def other(rows: np.ndarray, target: torch.Tensor) -> np.ndarray:
        log.info("task %s: %d of %d attributed examples are misclassified; attributing them "
                 "to the other label", job.task, len(rows), len(predicted))
        return pruning.attribution_maxima(job.model, {k: v[rows] for k, v in inputs.items()},
                                        target, engine, examples_per_call(engine))

    return pruning.label_rankings(dumped, job.settings.attribution.target, predicted,
                                  inputs["labels"], other)


def run(job: ModelJob) -> None:
    """Writes the tables per_layer (curves on the attributed dev examples, which need their
    own attributions), global_ (curves on the dev examples that did not score the heads) and
    claims."""
    cfg = job.settings.heads
    scores = attributed_head_scores(job.paths("parts"), job.split("dev"),
                                    head_shape=models.head_shape(job.model),
                                    target=job.settings.attribution.target)
    inputs = job.encoded("dev")
    n_attributed = len(scores["attribution"])
    n_importance = heads.evaluation_split(
        len(inputs["labels"]), n_attributed, importance_examples=cfg.importance_examples,
        min_evaluation=cfg.min_evaluation_examples, task=job.task)
    attributed = {k: v[:n_attributed] for k, v in inputs.items()}
    scores = heads.ranking_scores(job.model, attributed, scores, cfg.batch_size)
    by_label = _label_rankings(job, attributed, scores["attribution"])
    rankings = {
        pruning.GOLD: [by_label["gold"]], pruning.PREDICTED: [by_label["predicted"]],
        pruning.ATTENTION: [scores["attention"]],
        pruning.RANDOM: pruning.random_scores(scores["attention"].shape, seed=job.settings.seed,
                                              draws=cfg.random_seeds)}
    log.info("task %s: per-layer pruning on %d attributed examples", job.task, n_attributed)
    per_layer = pruning.per_layer_curves(job.model, attributed, rankings, cfg.batch_size)
    evaluation = {k: v[n_importance:] for k, v in inputs.items()}
    log.info("task %s: global pruning on the %d dev examples after the %d that scored the heads",
             job.task, len(evaluation["labels"]), n_importance)
    percents = list(cfg.prune_percents)
    importance = pd.read_parquet(job.inputs["importance"])
    global_ = pruning.global_curves(job.model, evaluation, importance, percents, cfg.batch_size)
    claims = on_models(claims_frame(pruning.per_layer_claims(per_layer)
                                    + pruning.global_claims(global_, percents,
                                                            evaluation["labels"])),
                       job.finetune_metrics)
    job.write_tables({"per_layer": per_layer.table, "global_": global_.table, "claims": claims},
                     meta={"importance_examples": n_importance,
                           "evaluation_examples": len(evaluation["labels"])})
    log_claims(claims, job.task)
