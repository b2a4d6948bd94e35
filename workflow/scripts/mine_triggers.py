"""Snakemake adapter of rule mine_triggers: attribute the source examples, rank their patterns."""

from attnlab.analyses.triggers import mine_triggers
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    mine_triggers(
        snakemake.input.model,
        source_path=snakemake.input.source,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        task_cfg=params.task,
        triggers_cfg=params.triggers,
        attribution_cfg=params.attribution,
        model_cfg=params.model,
        device=device,
        out=dict(snakemake.output.items()),
        provenance=provenance(dict(params.items())),
    )
