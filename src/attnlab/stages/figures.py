"""Rule figures: the report's page of every figure a rule marks for the report, by category,
each with its caption under it (attnlab.report.figures_page)."""

from __future__ import annotations

from pathlib import Path

from attnlab.job import Job
from attnlab.report.figures_page import Figure, write_figures_page


def run(job: Job) -> None:
    """Writes the page."""
    figures = [Figure(path, category, Path(caption).read_text(), task)
               for path, category, caption, task in job.settings.figures]
    write_figures_page(job.outputs["page"], figures, job.wildcards["name"])
