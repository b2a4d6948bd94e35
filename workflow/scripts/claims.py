"""Rule claims: attnlab.stages.claims."""

from attnlab.job import Job
from attnlab.stages import claims

Job.run_rule(snakemake, claims.run)
