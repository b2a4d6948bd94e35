"""Snakemake adapter of rule attack_eval: insert the mined triggers into every dev example."""

import torch

from attnlab.attack import attack_eval
from attnlab.device import pick_device, set_precision
from attnlab.outputs import provenance, setup_logging
from attnlab.tasks import TaskSpec

setup_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
params = snakemake.params
device = pick_device(params.device)
set_precision(params.precision, device)
attack_eval(
    snakemake.input.model,
    snakemake.input.dev,
    snakemake.input.triggers,
    snakemake.input.source,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    params.triggers,
    params.model,
    params.seed,
    device,
    dict(snakemake.output.items()),
    provenance(dict(params.items())),
)
