"""Snakemake adapter of rule mine_triggers: attribute the source examples, rank their patterns."""

import torch

from attnlab.device import pick_device, set_precision
from attnlab.outputs import provenance, setup_logging
from attnlab.tasks import TaskSpec
from attnlab.triggers import mine_triggers

setup_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
params = snakemake.params
device = pick_device(params.device)
set_precision(params.precision, device)
mine_triggers(
    snakemake.input.model,
    snakemake.input.source,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    params.task,
    params.triggers,
    params.attribution,
    params.model,
    device,
    dict(snakemake.output.items()),
    provenance(dict(params.items())),
)
