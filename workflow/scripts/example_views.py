"""Snakemake adapter of rule example_views: heatmaps and the HTML flow page of sampled examples."""

import torch

from attnlab.device import pick_device, set_precision
from attnlab.outputs import setup_logging
from attnlab.tasks import TaskSpec
from attnlab.views import example_views

setup_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
params = snakemake.params
device = pick_device(params.device)
set_precision(params.precision, device)
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
