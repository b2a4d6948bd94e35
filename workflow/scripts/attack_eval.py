"""Snakemake adapter of rule attack_eval: insert the mined triggers into every dev example."""

from attnlab.attack import attack_eval
from attnlab.device import start_model_job
from attnlab.outputs import provenance, workflow_job
from attnlab.tasks import TaskSpec

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    attack_eval(
        snakemake.input.model,
        snakemake.input.dev,
        snakemake.input.triggers,
        snakemake.input.source,
        TaskSpec.from_config(snakemake.wildcards.task, params.task),
        params.triggers,
        params.model,
        params.seed,
        device,
        dict(snakemake.output.items()),
        provenance(dict(params.items())),
    )
