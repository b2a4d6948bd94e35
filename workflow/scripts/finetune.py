"""Rule finetune: attnlab.stages.finetune."""

from attnlab.model_job import ModelJob
from attnlab.stages import finetune

ModelJob.run_rule(snakemake, finetune.run)
