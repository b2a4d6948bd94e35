"""Rule prune_eval: attnlab.stages.prune_eval."""

from attnlab.model_job import ModelJob
from attnlab.stages import prune_eval

ModelJob.run_rule(snakemake, prune_eval.run)
