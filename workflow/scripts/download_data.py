"""Snakemake adapter of rule download_data: one split of a hub dataset, as Parquet."""

from attnlab.data.hub import fetch_dataset_split
from attnlab.plumbing.outputs import workflow_job

wildcards = snakemake.wildcards
with workflow_job(snakemake):
    fetch_dataset_split(wildcards.dataset, name=wildcards.subset, split=wildcards.split,
                        out=snakemake.output[0])
