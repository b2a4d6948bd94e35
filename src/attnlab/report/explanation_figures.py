"""Figures of the explanation stage (Jain & Wallace 2019; Drozdyuk et al.): attention
permutation and adversarial keys / attention. One figure per task and analysis."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from attnlab.report.figures import note, note_if_flat, save_figure

# Bands of an example's median output TVD: a confident model's output either stays (TVD about 0)
# or flips (about 1), so a box plot of these values shows two lines; shares with counts read.
TVD_BANDS = ((0.0, 0.1, "below 0.1 (output kept)", "tab:blue"),
             (0.1, 0.9, "0.1 to 0.9", "0.6"),
             (0.9, 1.0 + 1e-9, "0.9 or more (output flipped)", "tab:red"))


def plot_attention_permutation(
    table: pd.DataFrame, summary: pd.DataFrame, path: str | os.PathLike
) -> None:
    """Jain & Wallace Fig. 2 and Drozdyuk et al.: per permuted layer, the share of examples
    whose median output TVD falls in each band (`TVD_BANDS`; the count of examples written on
    each bar), and the accuracy change."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    order = list(summary["permuted"])
    bottom = np.zeros(len(order))
    for low, high, label, colour in TVD_BANDS:
        counts = np.array([((table["permuted"] == name) & (table["tvd_median"] >= low)
                            & (table["tvd_median"] < high)).sum() for name in order])
        totals = np.array([(table["permuted"] == name).sum() for name in order])
        shares = counts / np.maximum(totals, 1)
        bars = axes[0].bar(range(len(order)), shares, bottom=bottom, color=colour, label=label)
        axes[0].bar_label(bars, labels=[str(c) if c else "" for c in counts],
                          label_type="center", fontsize=7, color="white")
        bottom += shares
    axes[0].set_xticks(range(len(order)), order)
    axes[0].set(xlabel="layer permuted", ylabel="share of examples", ylim=(0, 1),
                title="median output TVD under permuted attention\n(count of examples on the bars)")
    axes[0].legend(fontsize="small", title="median TVD", title_fontsize="small",
                   loc="upper left", bbox_to_anchor=(1.0, 1.0))
    sns.barplot(data=summary, x="permuted", y="accuracy_change", order=order, color="tab:red",
                ax=axes[1])
    axes[1].axhline(0, color="black", linewidth=0.5)
    axes[1].set(xlabel="layer permuted", ylabel="accuracy change (mean over permutations)",
                title="accuracy change")
    if not summary["accuracy_change"].abs().max():
        note(axes[1], "no permutation changed the accuracy")
    figure.suptitle(f"attention permutation, {table['task'].iloc[0]}", fontsize="medium")
    figure.tight_layout()
    save_figure(figure, path)


def plot_adversarial(
    keys: pd.DataFrame, attention: pd.DataFrame, epsilon: float, path: str | os.PathLike
) -> None:
    """Drozdyuk et al.'s adversarial keys (per layer: relative key distance and JSD of the attention
    they give; agreement in the title) and Jain & Wallace's adversarial attention (per layer:
    JSD reached with output TVD <= epsilon)."""
    figure, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    agreement = keys.drop_duplicates("example")["same_prediction"].mean()
    sns.boxplot(data=keys, x="layer", y="key_distance", color="tab:purple", ax=axes[0])
    axes[0].set(ylabel="||K - K_adv|| / ||K||",
                title=f"adversarial keys: distance\n(predictions kept: {agreement:.1%})")
    sns.boxplot(data=keys, x="layer", y="jsd", color="tab:green", ax=axes[1])
    axes[1].set(ylabel="JSD (nats)", ylim=(-0.02, 0.72),
                title="adversarial keys: attention JSD\n(max ln 2 = 0.69)")
    sns.boxplot(data=attention, x="layer", y="jsd", color="tab:orange", ax=axes[2])
    kept = attention["same_prediction"].mean()
    axes[2].set(ylabel="JSD (nats)", ylim=(-0.02, 0.72),
                title=f"adversarial attention (J&W): JSD at TVD <= {epsilon}\n"
                      f"(predictions kept: {kept:.1%})")
    for ax, values, what in ((axes[0], keys["key_distance"], "key distance"),
                             (axes[1], keys["jsd"], "JSD"), (axes[2], attention["jsd"], "JSD")):
        note_if_flat(ax, values, what)
    figure.suptitle(f"adversarial keys and attention, {keys['task'].iloc[0]}", fontsize="medium")
    figure.tight_layout()
    save_figure(figure, path)
