"""Rule claims: every stage's claims of the run (of every seed) in one page, each beside what
the papers named in report.papers state about it."""

from __future__ import annotations

from attnlab.job import Job
from attnlab.report.summary import claims_table


def run(job: Job) -> None:
    """Writes the page."""
    claims_table(job.paths("claims"), findings_paths=job.paths("findings"),
                 out=job.outputs["page"], origin=job.provenance)
