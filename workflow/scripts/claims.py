"""Snakemake adapter of rule claims: every stage's claims in one page, beside the papers'."""

from attnlab.outputs import provenance, setup_logging
from attnlab.report import claims_table

setup_logging(snakemake.log[0])
claims_table(
    snakemake.input.claims,
    snakemake.input.findings,
    snakemake.output.page,
    provenance(dict(snakemake.params.items())),
)
