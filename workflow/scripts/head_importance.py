"""Snakemake adapter of rule head_importance: score every head of one task's model."""

import torch

from attnlab.device import pick_device, set_precision
from attnlab.heads import head_importance
from attnlab.outputs import provenance, setup_logging
from attnlab.tasks import TaskSpec

setup_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
params = snakemake.params
device = pick_device(params.device)
set_precision(params.precision, device)
head_importance(
    snakemake.input.model,
    snakemake.input.dev,
    snakemake.input.parts,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    params.heads,
    params.model,
    params.target,
    params.seed,
    device,
    snakemake.output.importance,
    provenance(dict(params.items())),
)
