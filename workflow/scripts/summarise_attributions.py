"""Snakemake adapter of rule summarise_attributions: gather and summarise a task's shards."""

from attnlab.analyses.attribution_summary import summarise_task
from attnlab.data.groundtruth import recovery_claims_table
from attnlab.plumbing.outputs import provenance, workflow_job, write_json, write_table

with workflow_job(snakemake) as log:
    summary = summarise_task(snakemake.input.parts, snakemake.params.shards,
                             tolerance=snakemake.params.tolerance)
    log.info("task %s: %s", snakemake.wildcards.task, summary)
    origin = provenance(dict(snakemake.params.items()))
    write_json(snakemake.output.summary, {**summary, **origin})
    write_table(recovery_claims_table(summary["planted_pair_recovery"], snakemake.wildcards.task),
                snakemake.output.claims, origin)
