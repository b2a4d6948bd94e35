"""Snakemake adapter of rule run_summary: the run summary page of the report."""

from attnlab.plumbing.outputs import workflow_job
from attnlab.report.summary import run_summary

with workflow_job(snakemake):
    # named inputs: every rule's benchmark files (a rule with one job gives a single path)
    inputs = {key: [files] if isinstance(files, str) else list(files)
              for key, files in snakemake.input.items()}
    metrics = inputs.pop("finetune_metrics")
    run_summary(snakemake.params.config, benchmarks=inputs, finetune_metrics=metrics,
                out=snakemake.output.page)
