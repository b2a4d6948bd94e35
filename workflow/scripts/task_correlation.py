"""Rule task_correlation: attnlab.stages.task_correlation."""

from attnlab.job import Job
from attnlab.stages import task_correlation

Job.run_rule(snakemake, task_correlation.run)
