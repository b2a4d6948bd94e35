"""Snakemake adapter of rule prune_eval: per-layer and global pruning of one task, and claims."""

import torch

from attnlab.device import pick_device, set_precision
from attnlab.outputs import provenance, setup_logging
from attnlab.pruning import prune_eval
from attnlab.tasks import TaskSpec

setup_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
params = snakemake.params
device = pick_device(params.device)
set_precision(params.precision, device)
prune_eval(
    snakemake.input.model,
    snakemake.input.dev,
    snakemake.input.parts,
    snakemake.input.importance,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    params.heads,
    params.model,
    params.target,
    device,
    {"per_layer": snakemake.output.per_layer, "global": snakemake.output.global_,
     "claims": snakemake.output.claims},
    provenance(dict(params.items())),
)
