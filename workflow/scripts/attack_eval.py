"""Snakemake adapter of rule attack_eval: insert the mined triggers into every dev example."""

from attnlab.analyses.attack import attack_eval
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    attack_eval(
        snakemake.input.model,
        dev_path=snakemake.input.dev,
        triggers_path=snakemake.input.triggers,
        source_path=snakemake.input.source,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        triggers_cfg=params.triggers,
        model_cfg=params.model,
        seed=params.seed,
        device=device,
        out=dict(snakemake.output.items()),
        provenance=provenance(dict(params.items())),
    )
