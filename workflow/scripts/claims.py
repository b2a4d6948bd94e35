"""Snakemake adapter of rule claims: every stage's claims in one page, beside the papers'."""

from attnlab.plumbing.outputs import provenance, workflow_job
from attnlab.report.summary import claims_table

with workflow_job(snakemake):
    claims_table(
        snakemake.input.claims,
        findings_paths=snakemake.input.findings,
        out=snakemake.output.page,
        origin=provenance(dict(snakemake.params.items())),
    )
