"""Snakemake adapter of rule pruning_figures: per-layer and global pruning curves of all tasks."""

from attnlab.head_figures import pruning_figures
from attnlab.outputs import setup_logging

setup_logging(snakemake.log[0])
pruning_figures(
    snakemake.input.per_layer,
    snakemake.input.global_,
    snakemake.output.per_layer,
    snakemake.output.global_,
)
