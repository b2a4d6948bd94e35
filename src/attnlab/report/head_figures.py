"""Figures of the head analyses: pruning curves (rule pruning_figures) and the cross-task
correlation of head importance (rule task_correlation)."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from attnlab.analyses.pruning_labels import LEAK, pruned_half
from attnlab.report.figures import mark_not_testable, note_if_flat, save_figure


def _note_flat_tasks(grid: sns.FacetGrid, curves: pd.DataFrame) -> None:
    """A task whose accuracy no pruning changes says so on its panel."""
    for task, ax in grid.axes_dict.items():
        note_if_flat(ax, curves.loc[curves["task"] == task, "accuracy"],
                     "accuracy, whatever is pruned")


# The legend's name of each label's attribution ranking, saying whose protocol it is (drawn in
# its own dash style, so that the two labels' curves stay apart where they overlap).
RANKED_BY = {"gold": "gold label (the paper's)", "predicted": "predicted label (ours)",
             "": "no label"}


def _draw_leak(ax: plt.Axes, curves: pd.DataFrame, leak: pd.DataFrame) -> None:
    """The gold label's leak on one task's panel (`leak`: its row of the claims table, none
    where the task has no estimate): the unpruned accuracy dotted, the leak's 95 % interval
    an error bar about it at the k it is measured at, on the gold-ranked lowest-first curve,
    and its number in the panel's title."""
    leak = leak[leak["value"].notna()]
    if leak.empty:
        return
    row = leak.iloc[0]
    half = pruned_half(int(curves["k"].max()))
    unpruned = curves.loc[curves["k"] == 0, "accuracy"].iloc[0]
    ax.axhline(unpruned, color="0.5", linestyle=":", linewidth=1)
    ax.errorbar([half], [unpruned + row["value"]], fmt="none", ecolor="black", capsize=4,
                yerr=[[row["value"] - row["low"]], [row["high"] - row["value"]]])
    # in the panel's title, where no curve runs
    ax.set_title(f"{ax.get_title()}\ngold-label leak at k={half}:\n{row['value']:+.3g} "
                 f"[{row['low']:+.3g}, {row['high']:+.3g}]", fontsize=10)


def plot_per_layer(curves: pd.DataFrame, path: str | os.PathLike, *,
                   claims: pd.DataFrame) -> None:
    """Paper Fig. 3: accuracy against heads pruned per layer, one panel per task (attribution
    ranked by the gold label, the paper's, and by the predicted label, ours), with the gold
    label's leak from each task's claims (`claims`, prune_eval's tables of every task) on its
    panel (`_draw_leak`)."""
    # a random order has no lowest or highest heads: its line is named by the ranking alone
    order = (", " + curves["order"] + " first").where(curves["ranking"] != "random", "")
    curves = curves.assign(pruned=curves["ranking"] + order,
                           **{"ranked by": curves["label"].map(RANKED_BY)})
    grid = sns.relplot(data=curves, x="k", y="accuracy", hue="pruned", style="ranked by",
                       col="task", kind="line", marker="o", height=3.2,
                       facet_kws={"sharey": False})
    grid.set_axis_labels("heads pruned in every layer (k)", "accuracy")
    _note_flat_tasks(grid, curves)
    leaks = claims[claims["claim"] == LEAK]
    for task, ax in grid.axes_dict.items():
        _draw_leak(ax, curves[curves["task"] == task], leaks[leaks["task"] == task])
    save_figure(grid.figure, path)


def plot_global(curves: pd.DataFrame, path: str | os.PathLike) -> None:
    """Paper Fig. 4: accuracy against the share of heads pruned, one line per importance method
    (random: mean over seeds with its spread)."""
    grid = sns.relplot(data=curves, x="percent", y="accuracy", hue="method", col="task",
                       kind="line", marker="o", errorbar="sd", height=3.2,
                       facet_kws={"sharey": False})
    grid.set_axis_labels("heads pruned, lowest importance first (%)", "accuracy")
    _note_flat_tasks(grid, curves)
    save_figure(grid.figure, path)


def plot_task_correlation(
    importance: pd.DataFrame, correlations: pd.DataFrame, path: str | os.PathLike, *,
    claims: pd.DataFrame,
) -> None:
    """Paper Fig. 5: heatmap of Pearson r of attribution importance between tasks, and one
    scatter of head importance per task pair (a pair with a shuffled-label task, kind
    "shuffled", titled as the floor), at most three panels a row; marked as not testable with
    the reason where the run's `claims` (the stage's claims table) say so."""
    attribution = importance[importance["method"] == "attribution"]
    wide = attribution.pivot_table(index=["layer", "head"], columns="task", values="importance",
                                   sort=False)
    names = list(wide.columns)
    matrix = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
    for row in correlations.itertuples():
        matrix.loc[row.task_a, row.task_b] = matrix.loc[row.task_b, row.task_a] = row.r
    columns = min(3, 1 + len(correlations))
    rows = -(-(1 + len(correlations)) // columns)
    figure, axes = plt.subplots(rows, columns, squeeze=False,
                                figsize=(4.2 * columns, 3.8 * rows))
    axes = axes.ravel()
    sns.heatmap(matrix, ax=axes[0], vmin=-1, vmax=1, cmap="vlag", annot=True, fmt=".2f",
                square=True, cbar=False)
    axes[0].set_title("Pearson r, attribution importance")
    for ax, row in zip(axes[1:], correlations.itertuples(), strict=False):
        sns.scatterplot(x=wide[row.task_a], y=wide[row.task_b], hue=wide.index.get_level_values(
            "layer"), palette="viridis", ax=ax, legend=ax is axes[1])
        floor = " (shuffled-label floor)" if row.kind == "shuffled" else ""
        ax.set_title(f"r = {row.r:.2f}{floor}")
    if len(correlations):
        axes[1].legend(title="layer", fontsize="small")
    for ax in axes[1 + len(correlations):]:
        ax.set_visible(False)
    mark_not_testable(figure, claims)
    figure.tight_layout()
    save_figure(figure, path)
