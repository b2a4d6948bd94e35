"""What every figure module shares: the file-only backend, how a figure is saved, and the
mechanical checks every saved figure goes through.

The checks read the drawn figure (matplotlib's text extents after a draw), so they catch what a
reader would see: a figure too large to view, an empty or constant panel that says nothing, tick
labels printed over each other, a legend drawn over the data. A failed check is a WARNING of the
logger `attnlab.report.figures` naming the figure and the panel; the figure is still written.
"""

from __future__ import annotations

import logging
import os
import textwrap
from pathlib import Path

import matplotlib

# Files only: jobs run without a display. Every figure module imports this module, so the
# backend is set before any of them creates a figure.
matplotlib.use("Agg")
# seaborn puts layer numbers on categorical axes; matplotlib logs that at INFO for every panel
logging.getLogger("matplotlib.category").setLevel(logging.WARNING)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.collections import Collection, QuadMesh  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from attnlab.analyses.verdicts import UNTESTABLE  # noqa: E402
from attnlab.plumbing.outputs import atomic_path  # noqa: E402

log = logging.getLogger(__name__)

DPI = 120
# The largest figure a reader views without zooming out: a wide screen, a few screens tall.
MAX_WIDTH_PX = 1800
MAX_HEIGHT_PX = 2600
# The gid of a text that says why a panel is empty or flat (see `note`).
NOTE = "attnlab-note"


def note(ax: Axes, text: str, **kwargs) -> None:
    """Write `text` in the middle of panel `ax`: the reason why it is empty or constant, which
    the checks then accept."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", wrap=True,
            fontsize=kwargs.pop("fontsize", 9), gid=NOTE,
            bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "0.6"}, **kwargs)


def mark_not_testable(figure: plt.Figure, claims: pd.DataFrame) -> None:
    """Stamp `figure` with why the run cannot test the findings of `claims` (a stage's claims
    table) that it calls not testable, in red above the panels and framed in red: a figure of
    such a claim must not read as evidence for or against it. Nothing where every finding was
    judged."""
    untested = claims[(claims["kind"] == "finding") & (claims["verdict"] == UNTESTABLE)]
    reasons = list(dict.fromkeys(untested["reason"]))
    if not reasons:
        return
    figure.suptitle(textwrap.fill("NOT TESTABLE in this run: " + "; ".join(reasons),
                                  width=int(figure.get_figwidth() * 12)),
                    color="tab:red", fontweight="bold", fontsize=10)
    figure.patches.append(Rectangle((0.002, 0.002), 0.996, 0.996, transform=figure.transFigure,
                                    fill=False, edgecolor="tab:red", linewidth=3))


def note_if_flat(ax: Axes, values, what: str) -> None:
    """`note` on panel `ax` that `what` is the same everywhere, where `values` (what the panel
    draws) are all equal."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) and not np.ptp(values):
        note(ax, f"{what}: {values[0]:.3g} everywhere")


def _panel_name(ax: Axes, index: int) -> str:
    title = ax.get_title() or ax.get_title(loc="left") or ax.get_ylabel()
    return f"panel {index}" + (f" ({' '.join(title.split())!r})" if title else "")


def _points(collection: Collection, ax: Axes) -> bool:
    """Whether `collection` draws points at data coordinates (a scatter)."""
    return (collection.get_offset_transform() is ax.transData
            and len(collection.get_offsets()) > 0)


def _values(ax: Axes) -> list[np.ndarray]:
    """The data values a panel shows: y of its lines and points, heights of its bars (widths of
    horizontal ones), pixels of its images; reference lines (axhline, axvline) left out."""
    values = []
    for line in ax.get_lines():
        x, y = (np.asarray(v, dtype=float) for v in line.get_data())
        if line.get_transform() is not ax.transData:  # axhline / axvline: a reference
            continue
        values.append(y)
        if len(np.unique(x[np.isfinite(x)])) == 1 and len(y) > 1:  # a vertical segment
            values.append(x)
    for collection in ax.collections:
        # points (scatter) sit at data offsets; a collection without offsets reports one at 0
        if _points(collection, ax):
            values.append(np.asarray(collection.get_offsets(), dtype=float)[:, 1])
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    if bars:
        horizontal = (np.ptp([b.get_y() for b in bars]) > 0
                      and np.ptp([b.get_x() for b in bars]) == 0)
        values.append(np.array([b.get_width() if horizontal else b.get_height() for b in bars]))
    for mesh in ax.collections:
        if isinstance(mesh, QuadMesh):  # pcolormesh, seaborn's heatmap
            values.append(np.ma.filled(np.ma.asarray(mesh.get_array(), dtype=float),
                                       np.nan).ravel())
    for image in ax.images:
        if isinstance(image, AxesImage):
            values.append(np.asarray(image.get_array(), dtype=float).ravel())
    return [v[np.isfinite(v)] for v in values if np.isfinite(v).any()]


def _overlapping(labels: list, renderer) -> tuple[str, str] | None:
    """The first two visible, non-empty tick labels whose drawn extents overlap."""
    boxes = [(label.get_text(), label.get_window_extent(renderer)) for label in labels
             if label.get_visible() and label.get_text().strip()]
    for k, (text, box) in enumerate(boxes):
        for other, other_box in boxes[k + 1:]:
            # a pixel of touching is not overlap: fonts' boxes include their line spacing
            if box.overlaps(Bbox.from_extents(other_box.x0 + 1, other_box.y0 + 1,
                                              other_box.x1 - 1, other_box.y1 - 1)):
                return text, other
    return None


def _data_boxes(ax: Axes, renderer) -> list[Bbox]:
    """Display boxes of a panel's data: every point of its lines and collections, its bars."""
    boxes = []
    for line in ax.get_lines():
        if line.get_transform() is ax.transData and line.get_visible():
            points = ax.transData.transform(np.column_stack(line.get_data()).astype(float))
            boxes += [Bbox.from_bounds(x - 1, y - 1, 2, 2) for x, y in points
                      if np.isfinite([x, y]).all()]
    for collection in ax.collections:
        offsets = np.asarray(collection.get_offsets(), dtype=float)
        if _points(collection, ax):
            boxes += [Bbox.from_bounds(x - 1, y - 1, 2, 2)
                      for x, y in ax.transData.transform(offsets) if np.isfinite([x, y]).all()]
    boxes += [p.get_window_extent(renderer) for p in ax.patches
              if isinstance(p, Rectangle) and p.get_height() and p.get_width()]
    return boxes


def check_figure(figure: plt.Figure, name: str) -> list[str]:
    """The problems a reader would see in `figure` (named `name` in the messages), each also
    logged as a WARNING: too large, an empty or constant panel without a `note`, overlapping
    tick labels, a legend over the data."""
    problems = []
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    box = figure.get_tightbbox(renderer)
    width, height = box.width * DPI, box.height * DPI  # the tight box is in inches
    if width > MAX_WIDTH_PX or height > MAX_HEIGHT_PX:
        problems.append(f"{width:.0f} x {height:.0f} pixels, more than {MAX_WIDTH_PX} x "
                        f"{MAX_HEIGHT_PX}")
    for index, ax in enumerate(figure.axes):
        if not ax.get_visible() or not ax.axison or ax.get_label() == "<colorbar>":
            continue
        panel = _panel_name(ax, index)
        # a heatmap with its value written in every cell says what it shows
        cells = sum(np.size(m.get_array()) for m in ax.collections if isinstance(m, QuadMesh))
        noted = (any(text.get_gid() == NOTE for text in ax.texts)
                 or (cells > 0 and len(ax.texts) >= cells))
        values = _values(ax)
        if not noted:
            if not values or not sum(len(v) for v in values):
                problems.append(f"{panel} is empty and has no note saying why")
            else:
                everything = np.concatenate(values)
                # equal to float rounding, at the values' own scale (errors of 1e-8 differ)
                if len(everything) > 1 and np.ptp(everything) <= 1e-9 * np.abs(
                        everything).max():
                    problems.append(f"{panel} is flat (every value {everything[0]:.4g}) and "
                                    f"has no note saying why")
        for axis in ("x", "y"):
            labels = (ax.get_xticklabels() if axis == "x" else ax.get_yticklabels())
            clash = _overlapping(labels, renderer)
            if clash:
                problems.append(f"{panel}: {axis} tick labels {clash[0]!r} and {clash[1]!r} "
                                f"overlap")
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            frame = legend.get_window_extent(renderer)
            covered = sum(frame.overlaps(b) for b in _data_boxes(ax, renderer))
            if covered:
                problems.append(f"{panel}: the legend covers {covered} data point"
                                f"{'' if covered == 1 else 's'}")
    for legend in figure.legends:  # a legend of the whole figure must be clear of every panel
        frame = legend.get_window_extent(renderer)
        for index, ax in enumerate(figure.axes):
            covered = sum(frame.overlaps(b) for b in _data_boxes(ax, renderer))
            if covered:
                problems.append(f"the figure's legend covers {covered} data point"
                                f"{'' if covered == 1 else 's'} of {_panel_name(ax, index)}")
    for problem in problems:
        log.warning("figure %s: %s", name, problem)
    return problems


def save_figure(figure: plt.Figure, path: str | os.PathLike) -> None:
    """Check `figure` (`check_figure`), write it as a PNG, atomically, and close it."""
    check_figure(figure, "/".join(Path(path).parts[-2:]))  # the task folder names the task
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(figure)
