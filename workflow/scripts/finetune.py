"""Snakemake adapter of rule finetune: train one task's classifier and record its metrics."""

from attnlab.data.tasks import TaskSpec
from attnlab.engine.training import finetune
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job, write_json

params = snakemake.params
with workflow_job(snakemake):
    device, precision = start_model_job(snakemake.threads, params.device, params.precision)
    # the checkpoint is read from its local copy; params.model keeps the name it was given
    model = {**params.model, "pretrained": snakemake.input.pretrained or None}
    metrics = finetune(
        snakemake.input.train,
        snakemake.input.dev,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        model_cfg=model,
        train_cfg=params.finetune,
        device=device,
        seed=params.seed,
        out_dir=snakemake.output.model,
        bf16=precision.bf16,
        start=snakemake.input.start or None,
    )
    write_json(snakemake.output.metrics, {**metrics, **provenance(dict(params.items()))})
