"""Snakemake adapter of rule example_views: heatmaps and the HTML flow page of sampled examples."""

from attnlab.analyses.views import example_views
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import workflow_job

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
