"""Snakemake adapter of rule token_identifiability: token identifiability of one task's model."""

import torch

from attnlab.device import pick_device
from attnlab.outputs import provenance, setup_logging
from attnlab.tasks import TaskSpec
from attnlab.token_identifiability import analyse_task

setup_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
params = snakemake.params
analyse_task(
    snakemake.input.model,
    snakemake.input.train,
    snakemake.input.dev,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    params.settings,
    params.model,
    params.seed,
    pick_device(params.device),
    dict(snakemake.output.items()),
    provenance(dict(params.items())),
)
