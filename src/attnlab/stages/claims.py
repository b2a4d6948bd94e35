"""Rule claims: every stage's claims of the run (of every seed) grouped by paper and stage,
each finding beside the same finding of each control run (config controls), the checks apart:
the claims page, the findings the report's first page leads with, and the table both are built
from."""

from __future__ import annotations

from attnlab.analyses.claims import log_claims
from attnlab.job import Job
from attnlab.report.summary import claims_table


def run(job: Job) -> None:
    """Writes the page, the first page's fragment `landing` and the `table`; lists the checks
    in the log."""
    table = claims_table(job.paths("claims"), controls_paths=job.paths("controls"),
                         papers=job.settings.report.papers, out=job.outputs["page"],
                         origin=job.provenance, landing=job.outputs["landing"],
                         table_out=job.outputs["table"])
    checks = table[table["kind"] == "check"]
    for task, rows in checks.groupby(checks["task"].fillna("every task"), sort=False):
        log_claims(rows, f"check, {task}")
