"""Rule head_importance: attnlab.stages.head_importance."""

from attnlab.model_job import ModelJob
from attnlab.stages import head_importance

ModelJob.run_rule(snakemake, head_importance.run)
