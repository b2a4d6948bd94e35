"""Rule induction_heads: attnlab.stages.induction_heads."""

from attnlab.model_job import ModelJob
from attnlab.stages import induction_heads

ModelJob.run_rule(snakemake, induction_heads.run)
