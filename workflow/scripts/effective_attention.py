"""Snakemake adapter of rule effective_attention: effective attention of one task's model."""

from attnlab.device import start_model_job
from attnlab.effective_attention import analyse_task
from attnlab.outputs import provenance, workflow_job
from attnlab.tasks import TaskSpec

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    analyse_task(
        snakemake.input.model,
        snakemake.input.dev,
        TaskSpec.from_config(snakemake.wildcards.task, params.task),
        params.settings,
        params.model,
        device,
        dict(snakemake.output.items()),
        provenance(dict(params.items())),
    )
