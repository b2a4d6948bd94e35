"""Rule token_mixing: attnlab.stages.token_mixing."""

from attnlab.model_job import ModelJob
from attnlab.stages import token_mixing

ModelJob.run_rule(snakemake, token_mixing.run)
