"""Rule figures: attnlab.stages.figures."""

from attnlab.job import Job
from attnlab.stages import figures

Job.run_rule(snakemake, figures.run)
