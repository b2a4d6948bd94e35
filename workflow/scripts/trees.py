"""Rule trees: attnlab.stages.trees."""

from attnlab.job import Job
from attnlab.stages import trees

Job.run_rule(snakemake, trees.run)
