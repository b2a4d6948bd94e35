"""Rule quadrature_study: attnlab.stages.quadrature_study."""

from attnlab.model_job import ModelJob
from attnlab.stages import quadrature_study

ModelJob.run_rule(snakemake, quadrature_study.run)
