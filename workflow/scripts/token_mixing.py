"""Snakemake adapter of rule token_mixing: hidden token attribution of one task's model."""

from attnlab.analyses.token_mixing import analyse_task
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    analyse_task(
        snakemake.input.model,
        dev_path=snakemake.input.dev,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        cfg=params.settings,
        model_cfg=params.model,
        seed=params.seed,
        device=device,
        out=dict(snakemake.output.items()),
        provenance=provenance(dict(params.items())),
    )
