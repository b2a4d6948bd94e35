"""What every figure module shares: the file-only backend and how a figure is saved."""

from __future__ import annotations

import logging
import os

import matplotlib

# Files only: jobs run without a display. Every figure module imports this module, so the
# backend is set before any of them creates a figure.
matplotlib.use("Agg")
# seaborn puts layer numbers on categorical axes; matplotlib logs that at INFO for every panel
logging.getLogger("matplotlib.category").setLevel(logging.WARNING)

import matplotlib.pyplot as plt  # noqa: E402

from attnlab.plumbing.outputs import atomic_path  # noqa: E402


def save_figure(figure: plt.Figure, path: str | os.PathLike) -> None:
    """Write `figure` as a PNG, atomically, and close it."""
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(figure)
