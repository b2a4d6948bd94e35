"""Rule task_correlation (Hao et al. 2021 §4, Fig. 5): the attribution head importance of every
pair of tasks correlated (Pearson and Spearman, intervals over heads), beside a floor (a random
permutation of the heads) and a ceiling (the same task at the run's next seed, where the run
has several), and the findings on similar and dissimilar tasks."""

from __future__ import annotations

import pandas as pd

from attnlab.analyses.claims import COLUMNS, log_claims, on_models
from attnlab.analyses.task_correlation import (
    cross_task_claims,
    importance_matrix,
    task_correlations,
    why_not_comparable,
)
from attnlab.job import Job
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.outputs import write_table
from attnlab.report.head_figures import plot_task_correlation


def _importance(paths: list[str]) -> pd.DataFrame | None:
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True) if paths else None


def run(job: Job) -> None:
    """Writes the tables table (r of every task pair, and each task's floor and ceiling) and
    claims, with the job's provenance (a claim's task is the pair of tasks it is about), and
    the figure (Pearson r of the task pairs)."""
    cfg = job.settings.heads
    importance = _importance(job.paths("importance"))
    if "attribution" not in set(importance["method"]):
        raise ConfigError("task_correlation needs 'attribution' in heads.methods")
    wide = importance_matrix(importance)
    other_seed = _importance(job.paths("ceiling"))
    correlations = task_correlations(
        wide, None if other_seed is None else importance_matrix(other_seed),
        seed=job.settings.seed)
    untestable = why_not_comparable(job.settings.model.to_dict(), job.settings.tasks.to_dict())
    # the task pair a claim is about is its task
    claims = pd.DataFrame(cross_task_claims(wide, cfg.similar_pairs, cfg.dissimilar_pairs,
                                            untestable=untestable),
                          columns=["task", *COLUMNS])
    claims = on_models(claims, job.finetune_metrics)
    write_table(correlations, job.outputs["table"], job.provenance)
    write_table(claims, job.outputs["claims"], job.provenance)
    pairs = correlations[(correlations["kind"] == "tasks")
                         & (correlations["method"] == "pearson")]
    plot_task_correlation(importance, pairs, job.outputs["figure"], claims=claims)
    log_claims(claims)
