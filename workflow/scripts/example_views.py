"""Rule example_views: attnlab.stages.example_views."""

from attnlab.model_job import ModelJob
from attnlab.stages import example_views

ModelJob.run_rule(snakemake, example_views.run)
