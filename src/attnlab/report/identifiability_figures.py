"""Figures of the identifiability stage (Brunner et al. 2020): effective attention, token
identifiability, token mixing. One figure per task and analysis."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from attnlab.report.figures import note, save_figure

# A share of tokens whose own input is their largest contributor this high in every layer is
# a flat row of bars: the panel says so in words.
FLAT_SHARE = 0.95


def plot_effective_attention(
    per_head: pd.DataFrame, mass: pd.DataFrame, d_v: int, path: str | os.PathLike
) -> None:
    """Brunner et al. Fig. 1-2: r(A, A_eff) and the size of the non-identifiable component
    ‖A − A_eff‖_F / ‖A‖_F against sequence length, one line per layer (mean over heads and
    examples), d_v marked; then, per token category, the mean raw and effective attention mass
    on it per head, over the sequences longer than d_v (all when none is)."""
    categories = list(dict.fromkeys(mass["category"]))
    # the two line panels side by side, then one full-width row per category: every head's
    # bars need the width, and the figure stays within the figure checks' bounds
    layout = [["pearson_r", "relative_change"], *([c, c] for c in categories)]
    figure, named = plt.subplot_mosaic(layout, figsize=(11, 3.4 * (1 + len(categories))))
    axes = [named["pearson_r"], named["relative_change"], *(named[c] for c in categories)]
    by_length = (("pearson_r", "Pearson r(A, A_eff)", "raw vs effective attention"),
                 ("relative_change", "||A - A_eff||_F / ||A||_F",
                  "non-identifiable part of A"))
    for ax, (column, label, title) in zip(axes[:2], by_length, strict=True):
        sns.lineplot(data=per_head, x="length", y=column, hue="layer", marker="o",
                     palette="viridis", errorbar=None, ax=ax)
        ax.axvline(d_v, color="grey", linestyle="--", label=f"d_v = {d_v}")
        ax.set(xlabel="sequence length (tokens)", ylabel=label, title=title)
    # one legend for both line panels, right of the second: inside, it covers lines
    axes[0].get_legend().remove()
    axes[1].legend(fontsize="small", title="layer", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    long_ = mass[mass["length"] > d_v]
    which = f"sequences > {d_v} tokens" if len(long_) else f"all sequences (none > {d_v})"
    data = long_ if len(long_) else mass
    data = data.assign(head="L" + data["layer"].astype(str) + "H" + data["head"].astype(str))
    tidy = data.melt(id_vars=["head", "category"], value_vars=["raw", "effective"],
                     var_name="attention", value_name="mass")
    for ax, category in zip(axes[2:], categories, strict=True):
        sns.barplot(data=tidy[tidy["category"] == category], x="head", y="mass",
                    hue="attention", errorbar=None, legend=ax is axes[2], ax=ax)
        ax.set(xlabel="head", ylabel="mean attention mass",
               title=f"attention to {category}\n({which})")
        ax.tick_params(axis="x", labelrotation=90, labelsize="small")
        ax.axhline(0, color="black", linewidth=0.5)
    if categories:  # a decoder's prompts may have none
        axes[2].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # off bars
    figure.tight_layout()
    save_figure(figure, path)


def plot_token_identifiability(rates: pd.DataFrame, path: str | os.PathLike) -> None:
    """Brunner et al. Fig. 3: identifiability rate against layer, one line per map g (colour)
    and loss (dashes); layer 0 is the input embeddings."""
    figure, ax = plt.subplots(figsize=(5.2, 3.8))
    sns.lineplot(data=rates, x="layer", y="rate", hue="map", style="loss", markers=True, ax=ax)
    ax.set(xlabel="layer (0 = input embeddings)", ylabel="tokens identified (share)",
           title=f"token identifiability, {rates['task'].iloc[0]}", ylim=(-0.02, 1.02))
    ax.set_xticks(sorted(rates["layer"].unique()))
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # off the lines
    figure.tight_layout()
    save_figure(figure, path)


def plot_token_mixing(
    tokens: pd.DataFrame, offsets: pd.DataFrame, path: str | os.PathLike, max_offset: int = 8
) -> None:
    """Brunner et al. Fig. 4-5: per layer, the share of tokens whose largest contributor is their
    own input, the distribution of the self-contribution, and the mean contribution by relative
    offset i − j (|i − j| <= max_offset)."""
    figure, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    share = tokens.groupby("layer")["top_is_self"].mean().reset_index()
    sns.barplot(data=share, x="layer", y="top_is_self", color="tab:blue", ax=axes[0])
    axes[0].set(ylim=(0, 1.05), ylabel="share of tokens", xlabel="layer",
                title="own input is the largest contributor")
    if share["top_is_self"].min() >= FLAT_SHARE:
        # bars all at about 1 say one thing; say it in words
        lowest = share["top_is_self"].min()
        who = ("every token keeps its" if lowest == 1
               else f"at least {lowest:.0%} of the tokens keep their")
        note(axes[0], f"in every layer, {who} own input\nas the largest contributor "
                      "(the next panel shows by how much)", fontsize=8)
    sns.boxplot(data=tokens, x="layer", y="self_contribution", color="tab:orange",
                showfliers=False, ax=axes[1])
    axes[1].set(ylabel="contribution of own input", xlabel="layer",
                title="self-contribution (box: quartiles)")
    near = offsets[offsets["offset"].abs() <= max_offset]
    sns.lineplot(data=near, x="offset", y="mean_contribution", hue="layer", palette="viridis",
                 marker="o", ax=axes[2])
    axes[2].set(xlabel="relative offset i − j (input i, hidden token j)",
                ylabel="mean contribution", title="contribution by relative offset")
    estimators = tokens.drop_duplicates("example")["estimator"].value_counts()
    figure.suptitle(f"token mixing, {tokens['task'].iloc[0]}: " + ", ".join(
        f"{count} examples {name}" for name, count in estimators.items()), fontsize="medium")
    figure.tight_layout()
    save_figure(figure, path)
