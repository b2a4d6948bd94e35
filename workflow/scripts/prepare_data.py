"""Snakemake adapter of rule prepare_data: one task's train and dev splits."""

from attnlab.outputs import provenance, workflow_job, write_json
from attnlab.tasks import prepare_task

with workflow_job(snakemake):
    params = snakemake.params
    summary = prepare_task(
        snakemake.wildcards.task,
        params.task,
        params.seed,
        snakemake.output.train,
        snakemake.output.dev,
        # the downloaded files of a hub task (a local task's files are named in its config)
        (snakemake.input.train, snakemake.input.dev) if params.task["source"] == "hub" else None,
    )
    write_json(snakemake.output.summary, {**summary, **provenance(dict(params.items()))})
