"""Rule interaction_methods: attnlab.stages.interaction_methods."""

from attnlab.model_job import ModelJob
from attnlab.stages import interaction_methods

ModelJob.run_rule(snakemake, interaction_methods.run)
