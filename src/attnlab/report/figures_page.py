"""The report's page of figures: every figure a rule marks for the report, by category, each
drawn at its own size with its caption written under it. Snakemake's report shows one figure
at a time, shrunk to the window, and its caption only behind an "i" button; this page shows
them as a reader of a paper expects.

A caption is the rule's caption file (workflow/report/*.rst), rendered as Snakemake renders it:
a Jinja template (of which captions use `snakemake.wildcards.task`) in reStructuredText.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import jinja2
from docutils.core import publish_parts

from attnlab.report.html_pages import page, write_page

# Snakemake's own settings for caption templates (snakemake.report), so that a caption reads
# here as in its report.
CAPTIONS = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)


@dataclass(frozen=True)
class Figure:
    """A figure of the report: its file, the report's category for it, the caption file's
    text (reStructuredText in a Jinja template) and the task it is of (None: every task)."""

    path: str
    category: str
    caption: str
    task: str | None = None


def caption_html(caption: str, task: str | None) -> str:
    """A caption file's text as HTML, its template filled in for `task`."""
    snakemake = SimpleNamespace(wildcards=SimpleNamespace(task=task))
    text = CAPTIONS.from_string(caption).render(snakemake=snakemake)
    return publish_parts(text, writer="html")["body"]


def figure_html(figure: Figure) -> str:
    """One figure, embedded (the page must stand alone inside the report), at most the page's
    width, with its caption under it."""
    data = base64.b64encode(Path(figure.path).read_bytes()).decode()
    name = html.escape(figure.path)
    return (f"<figure><img src='data:image/png;base64,{data}' alt='{name}' "
            "style='max-width: 100%'>"
            f"<figcaption><code>{name}</code>{caption_html(figure.caption, figure.task)}"
            "</figcaption></figure>")


def figures_page(figures: Sequence[Figure], name: str) -> str:
    """The page of the run `name`'s figures: a section per category, in the order of the
    categories' names, each figure in the order given."""
    categories = sorted({f.category for f in figures})
    sections = [(category, "\n".join(figure_html(f) for f in figures if f.category == category))
                for category in categories]
    return page(f"Figures: {name}", sections)


def write_figures_page(path: str | os.PathLike, figures: Sequence[Figure], name: str) -> None:
    """Write `figures_page` at `path`."""
    write_page(path, figures_page(figures, name))
