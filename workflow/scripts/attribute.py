"""Rule attribute: attnlab.stages.attribute."""

from attnlab.model_job import ModelJob
from attnlab.stages import attribute

ModelJob.run_rule(snakemake, attribute.run)
