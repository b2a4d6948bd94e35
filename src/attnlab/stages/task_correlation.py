"""Rule task_correlation (Hao et al. 2021 §4, Fig. 5): the attribution head importance of every
pair of tasks correlated (Pearson and Spearman, intervals over heads), beside two floors (a
random permutation of the heads; a task fine-tuned on shuffled labels, where the config has
one) and a ceiling (the same task at the run's next seed, where the run has several), and the
findings on similar and dissimilar tasks."""

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
    """Writes the tables table (r of every task pair, those with a shuffled-label task apart,
    and each task's floor and ceiling) and claims, with the job's provenance (a claim's task
    is the pair of tasks it is about), and the figure (Pearson r of the task pairs)."""
    cfg = job.settings.heads
    importance = _importance(job.paths("importance"))
    if "attribution" not in set(importance["method"]):
        raise ConfigError("task_correlation needs 'attribution' in heads.methods")
    wide = importance_matrix(importance)
    other_seed = _importance(job.paths("ceiling"))
    tasks = job.settings.tasks.to_dict()
    shuffled = [name for name, task in tasks.items() if task.get("shuffle_labels")]
    correlations = task_correlations(
        wide, None if other_seed is None else importance_matrix(other_seed),
        seed=job.settings.seed, shuffled=shuffled)
    untestable = why_not_comparable(job.settings.model.to_dict(), tasks)
    # the task pair a claim is about is its task
    claims = pd.DataFrame(cross_task_claims(wide, cfg.similar_pairs, cfg.dissimilar_pairs,
                                            shuffled=shuffled, untestable=untestable),
                          columns=["task", *COLUMNS])
    # a shuffled-label model learns no task by design: it is the floor, not a model measured
    claims = on_models(claims, {task: metrics for task, metrics in job.finetune_metrics.items()
                                if task not in shuffled})
    write_table(correlations, job.outputs["table"], job.provenance)
    write_table(claims, job.outputs["claims"], job.provenance)
    pairs = correlations[correlations["kind"].isin(["tasks", "shuffled"])
                         & (correlations["method"] == "pearson")]
    plot_task_correlation(importance, pairs, job.outputs["figure"], claims=claims)
    log_claims(claims)
