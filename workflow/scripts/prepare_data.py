"""Snakemake adapter of rule prepare_data: one task's train and dev splits."""

from attnlab.data.tasks import read_task, write_task
from attnlab.data.tokenization import check_lengths
from attnlab.plumbing.outputs import provenance, workflow_job, write_json

params = snakemake.params
with workflow_job(snakemake):
    spec, train, dev = read_task(
        snakemake.wildcards.task,
        params.task,
        params.seed,
        # the downloaded files of a hub task (a local task's files are named in its config)
        (snakemake.input.train, snakemake.input.dev) if params.task["source"] == "hub" else None,
    )
    # an example too long for the model stops the run here, before any training
    check_lengths(spec, {**params.model, "pretrained": snakemake.input.pretrained or None},
                  train, dev)
    summary = write_task(spec, train=train, dev=dev, train_out=snakemake.output.train,
                         dev_out=snakemake.output.dev)
    write_json(snakemake.output.summary, {**summary, **provenance(dict(params.items()))})
