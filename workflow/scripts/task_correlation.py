"""Snakemake adapter of rule task_correlation: attribution head importance across tasks."""

from attnlab.heads import task_correlation
from attnlab.outputs import provenance, workflow_job

with workflow_job(snakemake):
    params = snakemake.params
    task_correlation(
        snakemake.input.importance,
        params.pairs["similar_pairs"],
        params.pairs["dissimilar_pairs"],
        dict(snakemake.output.items()),
        provenance(dict(params.items())),
    )
