"""Figures of the interaction_methods stage: one per evaluation and task."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from attnlab.analyses.interaction_eval import ALL, ANY, RANDOM
from attnlab.report.figures import save_figure


def plot_ground_truth(summary: pd.DataFrame, task: str, path: str | os.PathLike) -> None:
    """Share of planted examples whose strongest edge joins the planted pair, and the MRR of
    the planted edge, per method (rows) and layer or any layer (columns)."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 0.45 * summary["method"].nunique() + 1.8),
                                sharey=True)
    if summary.empty:  # real data: no planted pairs
        for ax in axes:
            ax.set_axis_off()
        axes[0].text(0, 0.5, f"{task}: no example has a planted pair")
        save_figure(figure, path)
        return
    scopes = [*sorted(set(summary["scope"]) - {ANY}, key=int), ANY]
    # both panels in one row order (by hit share, then MRR, of some layer), sharing labels
    anywhere = summary[summary["scope"] == ANY].sort_values(["hit_share", "mrr"],
                                                            ascending=False)
    for ax, column, title in ((axes[0], "hit_share", "strongest edge joins the planted pair"),
                              (axes[1], "mrr", "MRR of the planted edge")):
        wide = summary.pivot(index="method", columns="scope", values=column)
        wide = wide.loc[anywhere["method"], scopes]
        wide.index = [f"{m} ({n} ex.)" for m, n in zip(anywhere["method"], anywhere["examples"],
                                                       strict=True)]
        sns.heatmap(wide, annot=True, fmt=".2f", vmin=0, vmax=1, cmap="viridis", cbar=False,
                    ax=ax)
        ax.set(xlabel="layer", ylabel="", title=title)
    figure.suptitle(f"{task}: planted ground truth")
    save_figure(figure, path)


def plot_deletion(curves: pd.DataFrame, summary: pd.DataFrame, task: str,
                  path: str | os.PathLike) -> None:
    """Mean drop of F against the number of deleted edges (every layer at once), one line per
    method, the random order dashed; AOPC above random per method and scope."""
    figure, axes = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"wspace": 0.45})
    every = curves[curves["scope"] == ALL]
    mean = every.groupby(["method", "k"], sort=False)["drop"].mean()
    examples = every.groupby("method")["idx"].nunique()
    for method, line in mean.groupby(level="method", sort=False):
        axes[0].plot(line.index.get_level_values("k"), line.to_numpy(),
                     label=f"{method} ({examples[method]} ex.)",
                     linestyle="--" if method == RANDOM else "-",
                     color="black" if method == RANDOM else None)
    axes[0].set(xlabel="edges deleted per layer (top k)", ylabel="mean F(A) − F(deleted)",
                title="deletion curve, every layer at once")
    axes[0].legend(fontsize="small")
    scopes = [*sorted(set(summary["scope"]) - {ALL}, key=int), ALL]
    wide = (summary[summary["method"] != RANDOM]
            .pivot(index="method", columns="scope", values="aopc_over_random")[scopes])
    sns.heatmap(wide.sort_values(ALL, ascending=False), annot=True, fmt=".3f", center=0,
                cmap="RdBu_r", cbar=False, ax=axes[1])
    axes[1].set(xlabel="layer deleted in", ylabel="", title="AOPC minus random edges'")
    figure.suptitle(f"{task}: faithfulness (up to {examples.max()} examples)")
    save_figure(figure, path)
