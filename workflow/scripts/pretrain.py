"""Rule pretrain: attnlab.stages.pretrain."""

from attnlab.model_job import ModelJob
from attnlab.stages import pretrain

ModelJob.run_rule(snakemake, pretrain.run)
