"""Rule run_summary: the run summary page of the report (times per stage, fine-tuned models,
versions, the configuration)."""

from __future__ import annotations

from attnlab.job import Job
from attnlab.report.summary import run_summary

# The named input that is not a rule's benchmark files.
METRICS = "finetune_metrics"


def run(job: Job) -> None:
    """Writes the page."""
    benchmarks = {rule: job.paths(rule) for rule in job.inputs if rule != METRICS}
    run_summary(job.settings.config.to_dict(), benchmarks=benchmarks,
                finetune_metrics=job.paths(METRICS), out=job.outputs["page"])
