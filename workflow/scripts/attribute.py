"""Snakemake adapter of rule attribute: attribute one shard of a task's dev split."""

from attnlab.data.tasks import TaskSpec
from attnlab.engine.attribution_shards import attribute_shard
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job, write_json

params = snakemake.params
with workflow_job(snakemake):
    device, precision = start_model_job(snakemake.threads, params.device, params.precision)
    origin = provenance(dict(params.items()))
    summary = attribute_shard(
        snakemake.input.model,
        snakemake.input.dev,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        attribution_cfg=params.attribution,
        model_cfg=params.model,
        shard=int(snakemake.wildcards.shard),
        n_shards=params.attribution["shards"],
        device=device,
        out_path=snakemake.output.part,
        provenance=origin,
        bf16=precision.bf16,
    )
    write_json(snakemake.output.summary, {**summary, **origin})
