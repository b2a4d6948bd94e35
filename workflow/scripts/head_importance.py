"""Snakemake adapter of rule head_importance: score every head of one task's model."""

from attnlab.device import start_model_job
from attnlab.heads import head_importance
from attnlab.outputs import provenance, workflow_job
from attnlab.tasks import TaskSpec

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
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
