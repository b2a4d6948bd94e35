"""Snakemake adapter of rule finetune: train one task's classifier and record its metrics."""

import torch

from attnlab.device import pick_device, set_precision
from attnlab.outputs import provenance, setup_logging, write_json
from attnlab.tasks import TaskSpec
from attnlab.training import finetune

setup_logging(snakemake.log[0])
torch.set_num_threads(snakemake.threads)
params = snakemake.params
device = pick_device(params.device)
precision = set_precision(params.precision, device)
# the checkpoint is read from its local copy; params.model keeps the name it was given
model = {**params.model, "pretrained": snakemake.input.pretrained or None}
metrics = finetune(
    snakemake.input.train,
    snakemake.input.dev,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    model,
    params.finetune,
    device,
    params.seed,
    snakemake.output.model,
    bf16=precision.bf16,
)
write_json(snakemake.output.metrics, {**metrics, **provenance(dict(params.items()))})
