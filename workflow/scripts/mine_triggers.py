"""Rule mine_triggers: attnlab.stages.mine_triggers."""

from attnlab.model_job import ModelJob
from attnlab.stages import mine_triggers

ModelJob.run_rule(snakemake, mine_triggers.run)
