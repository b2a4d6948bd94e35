"""Snakemake adapter of rule adversarial_attention: adversarial keys and attention, one task."""

import torch

from attnlab.adversarial_attention import analyse_task
from attnlab.device import pick_device
from attnlab.outputs import provenance, setup_logging
from attnlab.tasks import TaskSpec

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
