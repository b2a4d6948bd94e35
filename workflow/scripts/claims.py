"""Snakemake adapter of rule claims: every stage's claims in one page, beside the papers'."""

from attnlab.outputs import provenance, workflow_job
from attnlab.report import claims_table

with workflow_job(snakemake):
    claims_table(
        snakemake.input.claims,
        snakemake.input.findings,
        snakemake.output.page,
        provenance(dict(snakemake.params.items())),
    )
