"""Snakemake adapter of rule head_importance: score every head of one task's model."""

from attnlab.analyses.heads import head_importance
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    head_importance(
        snakemake.input.model,
        dev_path=snakemake.input.dev,
        dump_paths=snakemake.input.parts,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        heads_cfg=params.heads,
        model_cfg=params.model,
        target=params.target,
        seed=params.seed,
        device=device,
        out_path=snakemake.output.importance,
        provenance=provenance(dict(params.items())),
    )
