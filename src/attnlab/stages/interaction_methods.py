"""Rule interaction_methods (docs/interaction_methods.md): which explanation finds the
interaction? Every method of attnlab.methods.registry (or those the config names) scores every
token pair of every layer of a task's first attributed dev examples, on the trained model and
on an untrained one of the same shape; each is judged against the planted pairs, by edge
deletion (signed and direction-free) and by token erasure, with bootstrap intervals, and the
claims are judged on them."""

from __future__ import annotations

import logging
from dataclasses import replace

import pandas as pd
import torch

from attnlab.analyses import interaction_methods
from attnlab.analyses.claims import log_claims, on_models
from attnlab.data.dumps import read_task_dump
from attnlab.engine import examples, models
from attnlab.engine.attribution import engine_options
from attnlab.engine.batch_size import rows_per_pass
from attnlab.methods import registry
from attnlab.methods.method import Method
from attnlab.model_job import ModelJob
from attnlab.plumbing.outputs import write_table
from attnlab.report.interaction_figures import plot_deletion, plot_ground_truth, plot_leaderboard
from attnlab.report.interaction_page import write_leaderboard_page

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the table scores (no task column: it sits in the task's partition of the
    interaction_scores dataset), the tables ground_truth, deletion, erasure, intervals, pairs
    and claims, the page leaderboard (with the time each method took) and the figures
    ground_truth_figure, deletion_figure and leaderboard_figure."""
    cfg = job.settings.interaction_methods
    chosen = _methods(job)  # refused before any work
    dump, _ = read_task_dump(job.inputs["parts"])
    dump, dev = interaction_methods.scored_examples(dump, job.split("dev"), cfg.examples)
    encoded = examples.encoded_frame(dev, job.spec, job.tokenizer, job.settings.model)
    options = _options(job, chosen, encoded)
    log.info("task %s: %d examples, methods %s", job.task, len(dump),
             ", ".join(method.name for method in chosen))
    comparisons = {}
    for name, model in (("trained", job.model),
                        ("untrained", models.untrained_copy(job.model, job.settings.seed))):
        comparisons[name] = interaction_methods.compare_methods(
            model, encoded, dump, options, special_ids=job.tokenizer.all_special_ids,
            device=job.device, desc=f"interactions ({name})")
    summary = interaction_methods.summarise(comparisons, reps=cfg.bootstrap,
                                            seed=job.settings.seed)
    summary = replace(summary, claims=on_models(summary.claims, job.finetune_metrics))
    _write(job, comparisons, summary, n_examples=len(dump))
    for method, s in comparisons["trained"].seconds.items():
        log.info("%s: %.2f s per example", method, s / len(dump))
    log_claims(summary.claims, job.task)


def _methods(job: ModelJob) -> list[Method]:
    """The methods of interaction_methods.methods that apply to the job's model (a decoder
    with a method named that does not apply to it is refused)."""
    chosen, left_out = registry.chosen(job.settings.interaction_methods.methods,
                                       decoder=models.family_of(job.model).causal)
    if left_out:
        log.info("task %s: a decoder; interaction_methods.methods leaves out %s (they "
                 "decompose an encoder's post-LN sublayer)", job.task, ", ".join(left_out))
    return chosen


def _options(job: ModelJob, chosen: list[Method],
             encoded: dict[str, torch.Tensor]) -> interaction_methods.Options:
    """How the methods run and are judged, from the job's settings."""
    engine = engine_options(job.settings.attribution)
    # AttAttr's copies per pass (attribution.batch_size: auto resolved, as the attribute stage
    # does, for the longest example)
    engine["batch_size"] = rows_per_pass(job.model.config, engine,
                                         encoded["input_ids"].shape[1], job.device)
    return interaction_methods.Options.of(chosen, job.settings.interaction_methods, engine,
                                          seed=job.settings.seed)


def _write(job: ModelJob, comparisons: dict[str, interaction_methods.Comparison],
           summary: interaction_methods.Summary, *, n_examples: int) -> None:
    """Every output of the job: the trained model's scores, the summary's tables, the page and
    the figures."""
    write_table(comparisons["trained"].scores, job.outputs["scores"], job.provenance)
    job.write_tables({"ground_truth": summary.ground_truth, "deletion": summary.deletion,
                      "erasure": summary.erasure, "intervals": summary.intervals,
                      "pairs": summary.pairs, "claims": summary.claims})
    write_leaderboard_page(job.outputs["leaderboard"], job.task, summary,
                           comparisons["trained"].seconds, n_examples)
    plot_ground_truth(summary.ground_truth[summary.ground_truth["model"] == "trained"], job.task,
                      job.outputs["ground_truth_figure"])
    plot_deletion(pd.concat([c.curves.assign(model=name) for name, c in comparisons.items()]),
                  job.task, job.outputs["deletion_figure"])
    plot_leaderboard(summary.intervals, job.task, job.outputs["leaderboard_figure"])
