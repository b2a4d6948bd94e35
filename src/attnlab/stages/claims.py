"""Rule claims: every stage's claims of the run (of every seed) grouped by paper and stage,
each beside what the papers named in report.papers state about it: the claims page, the
findings the report's first page leads with, and the table both are built from."""

from __future__ import annotations

from attnlab.job import Job
from attnlab.report.summary import claims_table


def run(job: Job) -> None:
    """Writes the page, the first page's fragment `landing` and the `table`."""
    claims_table(job.paths("claims"), findings_paths=job.paths("findings"),
                 out=job.outputs["page"], origin=job.provenance,
                 landing=job.outputs["landing"], table_out=job.outputs["table"])
