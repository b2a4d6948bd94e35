"""Rule task_correlation (Hao et al. 2021 §4, Fig. 5): the attribution head importance of every
pair of tasks correlated, and the paper's statements on similar and dissimilar tasks."""

from __future__ import annotations

import pandas as pd

from attnlab.analyses.claims import COLUMNS, log_claims
from attnlab.analyses.task_correlation import (
    cross_task_claims,
    task_correlations,
    why_not_comparable,
)
from attnlab.job import Job
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.outputs import write_table
from attnlab.report.head_figures import plot_task_correlation


def run(job: Job) -> None:
    """Writes the tables table (Pearson r of every task pair) and claims, with the job's
    provenance (a claim's task is the pair of tasks it is about), and the figure."""
    cfg = job.settings.heads
    importance = pd.concat([pd.read_parquet(p) for p in job.paths("importance")],
                           ignore_index=True)
    if "attribution" not in set(importance["method"]):
        raise ConfigError("task_correlation needs 'attribution' in heads.methods")
    correlations = task_correlations(importance)
    # the task pair a claim is about is its task
    untestable = why_not_comparable(job.settings.model.to_dict(), job.settings.tasks.to_dict())
    claims = pd.DataFrame(cross_task_claims(correlations, cfg.similar_pairs, cfg.dissimilar_pairs,
                                            untestable=untestable),
                          columns=["task", *COLUMNS])
    write_table(correlations, job.outputs["table"], job.provenance)
    write_table(claims, job.outputs["claims"], job.provenance)
    plot_task_correlation(importance, correlations, job.outputs["figure"])
    log_claims(claims)
