"""Rule pruning_figures: attnlab.stages.pruning_figures."""

from attnlab.job import Job
from attnlab.stages import pruning_figures

Job.run_rule(snakemake, pruning_figures.run)
