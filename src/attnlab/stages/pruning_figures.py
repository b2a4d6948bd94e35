"""Rule pruning_figures (Hao et al. 2021 Figs. 3 and 4): the per-layer and global pruning
curves of every task."""

from __future__ import annotations

import pandas as pd

from attnlab.job import Job
from attnlab.report.head_figures import plot_global, plot_per_layer


def run(job: Job) -> None:
    """Writes the figures per_layer and global_ from every task's curve tables (per_layer with
    the gold label's leak from every task's claims)."""
    plot_per_layer(pd.concat([pd.read_parquet(p) for p in job.paths("per_layer")]),
                   job.outputs["per_layer"],
                   claims=pd.concat([pd.read_parquet(p) for p in job.paths("claims")]))
    plot_global(pd.concat([pd.read_parquet(p) for p in job.paths("global_")]),
                job.outputs["global_"])
