"""Snakemake adapter of rule summarise_attributions: gather and summarise a task's shards."""

from attnlab.dumps import summarise_task
from attnlab.outputs import provenance, setup_logging, write_json

log = setup_logging(snakemake.log[0])
summary = summarise_task(snakemake.input.parts, snakemake.params.shards,
                         tolerance=snakemake.params.tolerance)
log.info("task %s: %s", snakemake.wildcards.task, summary)
write_json(snakemake.output.summary, {**summary, **provenance(dict(snakemake.params.items()))})
