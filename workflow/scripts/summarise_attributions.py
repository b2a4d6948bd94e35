"""Rule summarise_attributions: attnlab.stages.summarise_attributions."""

from attnlab.job import Job
from attnlab.stages import summarise_attributions

Job.run_rule(snakemake, summarise_attributions.run)
