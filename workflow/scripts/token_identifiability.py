"""Rule token_identifiability: attnlab.stages.token_identifiability."""

from attnlab.model_job import ModelJob
from attnlab.stages import token_identifiability

ModelJob.run_rule(snakemake, token_identifiability.run)
