"""Rule attention_permutation: attnlab.stages.attention_permutation."""

from attnlab.model_job import ModelJob
from attnlab.stages import attention_permutation

ModelJob.run_rule(snakemake, attention_permutation.run)
