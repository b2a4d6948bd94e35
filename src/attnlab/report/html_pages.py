"""HTML pages of tables: the report's own pages and a stage's leaderboard."""

from __future__ import annotations

import html
import os

import pandas as pd

from attnlab.plumbing.outputs import atomic_path

STYLE = """<style>
body { font-family: sans-serif; font-size: 14px; margin: 1em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
pre { background: #f7f7f7; padding: 8px; }
figure { margin: 1em 0 2.5em; }
figcaption { max-width: 60em; }
</style>"""


def page(title: str, sections: list[tuple[str, str]]) -> str:
    """A whole HTML page: `title` and each (heading, HTML content) section."""
    body = "".join(f"<h2>{html.escape(head)}</h2>\n{content}\n" for head, content in sections)
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title>{STYLE}</head>\n<body><h1>{html.escape(title)}</h1>\n{body}</body></html>\n")


def write_page(path: str | os.PathLike, text: str) -> None:
    """Write an HTML page atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def table_html(frame: pd.DataFrame) -> str:
    """`frame` as an HTML table, numbers to 4 significant digits."""
    return frame.to_html(index=False, na_rep="—", float_format=lambda x: f"{x:.4g}",
                         border=0)


def write_tables_page(
    path: str | os.PathLike, title: str, sections: list[tuple[str, str, pd.DataFrame]]
) -> None:
    """An HTML page of tables, each under its heading with a note (HTML) above it."""
    write_page(path, page(title, [(head, f"<p>{note}</p>" + table_html(frame))
                                  for head, note, frame in sections]))


