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
        dev_path=snakemake.input.dev,
        dump_paths=snakemake.input.parts,
        tree_figures=snakemake.input.tree_figures,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        trees_cfg=params.trees,
        attribution_cfg=params.attribution,
        model_cfg=params.model,
        seed=params.seed,
        device=device,
        out_dir=snakemake.output.views,
    )
