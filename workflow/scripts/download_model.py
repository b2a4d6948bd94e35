"""Rule download_model: attnlab.stages.download_model."""

from attnlab.job import Job
from attnlab.stages import download_model

Job.run_rule(snakemake, download_model.run)
