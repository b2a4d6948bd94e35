"""Figure of the quadrature study (rule quadrature_study): every rule's error against its cost."""

from __future__ import annotations

import os
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from attnlab.report.figures import note, save_figure


def _few_log_ticks(ax: Axes) -> None:
    """Readable log ticks: on the errors (y, several decades) powers of ten only; on the costs
    (x, often within one decade) 1, 2 and 5 times them, so that a short range has labels too.
    No labels on the minor ticks: over less than a decade matplotlib labels them, and they print
    over each other."""
    powers = FuncFormatter(lambda value, _: f"{value:.0e}".replace("e-0", "e-").replace(
        "e+0", "e"))
    for axis, subs, labels in ((ax.xaxis, (1.0, 2.0, 5.0), FuncFormatter(lambda v, _: f"{v:g}")),
                               (ax.yaxis, (1.0,), powers)):
        if axis.get_scale() != "log":
            continue
        axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=6))
        axis.set_major_formatter(labels)
        axis.set_minor_formatter(NullFormatter())


def plot_study(reports: dict[str, dict[str, Any]], path: str | os.PathLike) -> None:
    """Error against cost, one point per rule: per-head maximum error (median) against gradient
    evaluations, and completeness error (p99) against seconds per example; one row per task."""
    figure, axes = plt.subplots(len(reports), 2, figsize=(10, 3.6 * len(reports)), squeeze=False)
    for row, (task, report) in zip(axes, reports.items(), strict=True):
        for name, entry in report["rules"].items():
            marker = "*" if name.startswith("adaptive") else "o"
            for ax, x, y in ((row[0], entry["grad_nodes_mean"], entry["head_max_error"]["median"]),
                             (row[1], entry["seconds_per_example"],
                              entry["completeness_abs_error"]["p99"])):
                if y is None:  # no layer to compare
                    continue
                y = max(y, 1e-9)  # an exact 0 has no place on a log scale
                ax.scatter(x, y, marker=marker, s=60)
                ax.annotate(name, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        # a log scale without a point fails to draw
        scale = "log" if row[0].collections else "linear"
        if not row[0].collections:
            note(row[0], f"no layer to compare: none changes F by more than "
                         f"{report['min_delta']:g}\nwhen its attention is zeroed")
        row[0].set(xscale=scale, yscale=scale, title=f"{task}: per-head maximum",
                   xlabel="gradient evaluations per (example, layer)",
                   ylabel="relative error, median")
        row[1].axhline(report["tolerance"], color="grey", linestyle="--", linewidth=1)
        errors = np.array([entry["completeness_abs_error"]["p99"]
                           for entry in report["rules"].values()])
        # a model whose every layer is exact to float rounding: the rules' errors are one
        if np.ptp(errors) <= 1e-9 * np.abs(errors).max():
            note(row[1], f"every rule's error is {errors[0]:.2g}: they do not differ here")
        row[1].set(xscale="log", yscale="log", title=f"{task}: completeness",
                   xlabel="seconds per example (attribute job)", ylabel="absolute error, p99")
        for ax in row:
            _few_log_ticks(ax)
    figure.tight_layout()
    save_figure(figure, path)
