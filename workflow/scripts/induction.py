"""Rule induction: attnlab.stages.induction."""

from attnlab.model_job import ModelJob
from attnlab.stages import induction

ModelJob.run_rule(snakemake, induction.run)
