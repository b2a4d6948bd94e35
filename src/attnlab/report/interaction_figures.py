"""Figures of the interaction_methods stage: one per evaluation and task."""

from __future__ import annotations

import os
import textwrap

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from attnlab.analyses.interaction_eval import ALL, ANY, MEASURES, RANDOM
from attnlab.report.figures import note, save_figure


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


# The share of the leaderboard's height under its legend.
LEGEND_TOP = 0.93
# The share of the deletion figure's width left of its legend.
LEGEND_SPLIT = 0.78


def plot_deletion(curves: pd.DataFrame, task: str, path: str | os.PathLike) -> None:
    """Mean drop of F and mean total variation against the number of deleted edges (every
    layer at once), one line per method, the random order dashed; the trained model above, the
    untrained one below, one legend beside the panels."""
    every = curves[curves["scope"] == ALL]
    models = list(dict.fromkeys(every["model"]))
    figure, axes = plt.subplots(len(models), 2, figsize=(12, 3.6 * len(models)), squeeze=False,
                                sharex=True)
    methods = list(dict.fromkeys(every["method"]))
    # one hue per method (tab20's pairs of one hue in two shades were mistaken for each other);
    # tab10 has ten, enough for every method but random, which is black
    scored = [m for m in methods if m != RANDOM]
    palette = "tab10" if len(scored) <= 10 else "tab20"
    colours = dict(zip(scored, sns.color_palette(palette, len(scored)), strict=True))
    for row, model in enumerate(models):
        mine = every[every["model"] == model]
        for col, (column, label) in enumerate((("drop", "mean F(A) − F(deleted)"),
                                              ("tv", "mean total variation"))):
            ax = axes[row, col]
            mean = mine.groupby(["method", "k"], sort=False)[column].mean()
            for method in methods:
                line = mean.loc[method]
                ax.plot(line.index, line.to_numpy(), label=method,
                        linestyle="--" if method == RANDOM else "-",
                        color="black" if method == RANDOM else colours[method])
            kind = "signed, target class" if column == "drop" else "direction-free"
            ax.set(ylabel=label, title=f"{model} model: {kind}")
            if row == len(models) - 1:
                ax.set_xlabel("edges deleted per layer (top k)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    figure.suptitle(f"{task}: edge deletion, every layer at once "
                    f"({every['idx'].nunique()} examples)")
    # the legend gets a column of its own right of the panels, which tight_layout keeps free
    # (a figure legend is no part of its layout, so the panels would otherwise run under it)
    figure.tight_layout(rect=(0, 0, LEGEND_SPLIT, 1))
    figure.legend(handles, labels, loc="center left", bbox_to_anchor=(LEGEND_SPLIT, 0.5),
                  fontsize="small", title="method")
    save_figure(figure, path)


# How the leaderboard names each model: the untrained one is the control, what a measure gives
# with nothing learned (a score of 0 there is no merit, even where lower is better).
MODEL_LABELS = {"trained": "trained model",
                "untrained": "control: untrained model (nothing learned)"}


def measure_title(measure: str) -> str:
    """A leaderboard panel's title: what the measure is, in words, on lines of a panel's width."""
    return textwrap.fill(MEASURES[measure][0], width=34)


def better_label(higher: bool) -> str:
    """The x-axis label of a measure's panel: which way is better, drawn as an arrow."""
    return "higher is better →" if higher else "← lower is better"


def plot_leaderboard(table: pd.DataFrame, task: str, path: str | os.PathLike) -> None:
    """Each measure's mean per method with its bootstrap interval: the trained model filled,
    the untrained control hollow and grey; one panel per measure, titled in words, its x axis
    saying which way is better."""
    measures = [m for m in MEASURES if m in set(table["measure"])]
    # three panels a row keep the figure under 1,700 pixels wide
    rows = -(-len(measures) // 3)
    figure, axes = plt.subplots(rows, 3, figsize=(11, 4.6 * rows), sharey=True, squeeze=False)
    for ax in axes.flat[len(measures):]:
        ax.set_axis_off()
    order = (table[(table["model"] == "trained") & (table["measure"] == "deletion_tv")]
             .sort_values("mean")["method"].tolist())
    y = {method: i for i, method in enumerate(order)}
    for ax, measure in zip(axes.flat, measures, strict=False):
        for model, offset, face, colour in (("trained", 0.15, None, "C0"),
                                            ("untrained", -0.15, "none", "0.5")):
            rows = table[(table["model"] == model) & (table["measure"] == measure)]
            rows = rows[rows["method"].isin(y)]
            ax.errorbar(rows["mean"], rows["method"].map(y) + offset,
                        xerr=[rows["mean"] - rows["low"], rows["high"] - rows["mean"]],
                        fmt="o", color=colour, markerfacecolor=face,
                        label=MODEL_LABELS.get(model, model), capsize=2)
        shown = table[(table["measure"] == measure) & table["method"].isin(y)]
        if shown["mean"].isna().all():
            note(ax, "no example to measure it on")
        ax.set_title(measure_title(measure), fontsize="medium")
        ax.set_xlabel(better_label(MEASURES[measure][1]), fontweight="bold")
        ax.grid(axis="x", alpha=0.3)
        # a third of the figure's width holds four tick labels; more print over each other
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
        ax.tick_params(axis="x", labelsize="small")
    for row in axes:
        row[0].set_yticks(range(len(order)), order)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    figure.suptitle(f"{task}: interaction methods, mean and 95 % bootstrap interval")
    # the legend in a row of its own under the title, clear of every panel
    figure.tight_layout(rect=(0, 0, 1, LEGEND_TOP))
    figure.legend(handles, labels, loc="upper center", ncols=2,
                  bbox_to_anchor=(0.5, LEGEND_TOP + (1 - LEGEND_TOP) / 2))
    save_figure(figure, path)
