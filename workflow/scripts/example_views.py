"""Snakemake adapter of rule example_views: heatmaps and the HTML flow page of sampled examples."""

from attnlab.device import start_model_job
from attnlab.outputs import workflow_job
from attnlab.tasks import TaskSpec
from attnlab.views import example_views

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    example_views(
        snakemake.input.model,
        snakemake.input.dev,
        snakemake.input.parts,
        snakemake.input.tree_figures,
        TaskSpec.from_config(snakemake.wildcards.task, params.task),
        params.trees,
        params.attribution,
        params.model,
        params.seed,
        device,
        snakemake.output.views,
    )
