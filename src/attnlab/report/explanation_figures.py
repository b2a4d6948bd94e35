"""Figures of the explanation stage (Jain & Wallace 2019; Drozdyuk et al.): attention
permutation and adversarial keys / attention. One figure per task and analysis."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from attnlab.report.figures import save_figure


def plot_attention_permutation(
    table: pd.DataFrame, summary: pd.DataFrame, path: str | os.PathLike
) -> None:
    """Jain & Wallace Fig. 2 and Drozdyuk et al.: per permuted layer, the distribution over examples
    of the median output TVD, and the accuracy change."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    order = list(summary["permuted"])
    sns.boxplot(data=table, x="permuted", y="tvd_median", order=order, color="tab:blue",
                ax=axes[0])
    axes[0].set(xlabel="layer permuted", ylabel="median TVD of the output (per example)",
                title="output change under permuted attention")
    sns.barplot(data=summary, x="permuted", y="accuracy_change", order=order, color="tab:red",
                ax=axes[1])
    axes[1].axhline(0, color="black", linewidth=0.5)
    axes[1].set(xlabel="layer permuted", ylabel="accuracy change (mean over permutations)",
                title="accuracy change")
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
    figure.suptitle(f"adversarial keys and attention, {keys['task'].iloc[0]}", fontsize="medium")
    figure.tight_layout()
    save_figure(figure, path)
