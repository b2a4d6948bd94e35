"""Snakemake adapter of rule pretrain: the shared starting point of every task's model."""

from attnlab.data.tasks import TaskSpec
from attnlab.engine.training import pretrain
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job, write_json

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    metrics = pretrain(
        snakemake.input.train,
        specs=[TaskSpec.from_config(task, spec) for task, spec in params.tasks.items()],
        model_cfg=params.model,
        pretrain_cfg=params.model["pretrain"],
        device=device,
        seed=params.seed,
        out_dir=snakemake.output.model,
    )
    write_json(snakemake.output.metrics, {**metrics, **provenance(dict(params.items()))})
