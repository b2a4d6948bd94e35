"""Rule download_data: attnlab.stages.download_data."""

from attnlab.job import Job
from attnlab.stages import download_data

Job.run_rule(snakemake, download_data.run)
