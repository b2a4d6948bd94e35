"""Snakemake adapter of rule download_model: a hub checkpoint's files, as published."""

from attnlab.data.hub import fetch_checkpoint
from attnlab.plumbing.outputs import workflow_job

with workflow_job(snakemake):
    fetch_checkpoint(snakemake.wildcards.model, snakemake.output[0])
