"""Rule effective_attention: attnlab.stages.effective_attention."""

from attnlab.model_job import ModelJob
from attnlab.stages import effective_attention

ModelJob.run_rule(snakemake, effective_attention.run)
