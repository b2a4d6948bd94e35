"""Snakemake adapter of rule pruning_figures: per-layer and global pruning curves of all tasks."""

from attnlab.plumbing.outputs import workflow_job
from attnlab.report.head_figures import pruning_figures

with workflow_job(snakemake):
    pruning_figures(
        per_layer_paths=snakemake.input.per_layer,
        global_paths=snakemake.input.global_,
        per_layer_png=snakemake.output.per_layer,
        global_png=snakemake.output.global_,
    )
