"""Rule adversarial_attention: attnlab.stages.adversarial_attention."""

from attnlab.model_job import ModelJob
from attnlab.stages import adversarial_attention

ModelJob.run_rule(snakemake, adversarial_attention.run)
