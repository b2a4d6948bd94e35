"""Snakemake adapter of rule mine_triggers: attribute the source examples, rank their patterns."""

from attnlab.device import start_model_job
from attnlab.outputs import provenance, workflow_job
from attnlab.tasks import TaskSpec
from attnlab.triggers import mine_triggers

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
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
