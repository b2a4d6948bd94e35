"""Snakemake adapter of rule attribute: attribute one shard of a task's dev split."""

import torch

from attnlab.device import pick_device, set_precision
from attnlab.dumps import attribute_shard
from attnlab.outputs import provenance, setup_logging, write_json
from attnlab.tasks import TaskSpec

setup_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
params = snakemake.params
device = pick_device(params.device)
set_precision(params.precision, device)
origin = provenance(dict(params.items()))
summary = attribute_shard(
    snakemake.input.model,
    snakemake.input.dev,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    params.attribution,
    params.model,
    int(snakemake.wildcards.shard),
    params.attribution["shards"],
    device,
    snakemake.output.part,
    origin,
)
write_json(snakemake.output.summary, {**summary, **origin})
