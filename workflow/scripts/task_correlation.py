"""Snakemake adapter of rule task_correlation: attribution head importance across tasks."""

from attnlab.analyses.task_correlation import task_correlation
from attnlab.plumbing.outputs import provenance, workflow_job

with workflow_job(snakemake):
    params = snakemake.params
    task_correlation(
        snakemake.input.importance,
        similar=params.pairs["similar_pairs"],
        dissimilar=params.pairs["dissimilar_pairs"],
        out=dict(snakemake.output.items()),
        provenance=provenance(dict(params.items())),
    )
