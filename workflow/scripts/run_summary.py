"""Rule run_summary: attnlab.stages.run_summary."""

from attnlab.job import Job
from attnlab.stages import run_summary

Job.run_rule(snakemake, run_summary.run)
