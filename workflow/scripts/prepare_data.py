"""Rule prepare_data: attnlab.stages.prepare_data."""

from attnlab.job import Job
from attnlab.stages import prepare_data

Job.run_rule(snakemake, prepare_data.run)
