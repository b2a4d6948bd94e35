"""Snakemake adapter of rule pruning_figures: per-layer and global pruning curves of all tasks."""

from attnlab.head_figures import pruning_figures
from attnlab.outputs import workflow_job

with workflow_job(snakemake):
    pruning_figures(
        snakemake.input.per_layer,
        snakemake.input.global_,
        snakemake.output.per_layer,
        snakemake.output.global_,
    )
