"""Rule figures: the report's page of every figure a rule marks for the report, by category,
each with its caption under it (attnlab.report.figures_page)."""

from __future__ import annotations

import re
from pathlib import Path

from attnlab.job import Job
from attnlab.report.figures_page import Figure, write_figures_page


def _pngs(path: str) -> list[str]:
    """A figure's file, or the figures in a rule's folder of figures (whose names are known only
    once the rule has run), numbers in their names in numeric order (tree_3 before tree_10)."""
    folder = Path(path)
    if not folder.is_dir():
        return [path]
    return [str(p) for p in sorted(folder.glob("*.png"), key=_numeric_order)]


def _numeric_order(path: Path) -> list[str | int]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def run(job: Job) -> None:
    """Writes the page."""
    figures = [Figure(png, category, Path(caption).read_text(), task)
               for path, category, caption, task in job.settings.figures
               for png in _pngs(path)]
    write_figures_page(job.outputs["page"], figures, job.wildcards["name"])
