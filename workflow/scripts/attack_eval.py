"""Rule attack_eval: attnlab.stages.attack_eval."""

from attnlab.model_job import ModelJob
from attnlab.stages import attack_eval

ModelJob.run_rule(snakemake, attack_eval.run)
