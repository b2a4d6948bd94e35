"""Figures of the information-flow stages: attribution trees, tree sizes and
attention-vs-attribution heatmaps."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlab.report.figures import save_figure

if TYPE_CHECKING:
    from attnlab.analyses.trees import Tree

PLANTED_COLOUR = "tab:red"


def _class_name(label_names: list[str], index: int) -> str:
    return label_names[index] if 0 <= index < len(label_names) else str(index)


def _mark_planted(labels, planted: tuple[int, int] | None) -> None:
    for position, label in enumerate(labels):
        if planted is not None and position in planted:
            label.set_color(PLANTED_COLOUR)
            label.set_fontweight("bold")


def plot_tree(row: pd.Series, tree: Tree, n_layers: int, label_names: list[str], tau: float,
              planted: tuple[int, int] | None, path: str | os.PathLike) -> None:
    """One example's (dump row's) attribution tree as a layered graph: x = token position,
    y = the layer in which a node joined the tree (the top node at the last layer, the root
    [CLS] above it). Edge width grows with the normalised score; planted tokens are red."""
    tokens = list(row["tokens"])
    n = len(tokens)
    height = {tree.top: n_layers - 1} if tree.top is not None else {}
    for layer, _, j, _ in tree.edges:
        height[j] = layer
    figure, ax = plt.subplots(figsize=(max(6.0, 0.5 * n), 1.2 + 0.9 * (n_layers + 1)))
    for layer in range(n_layers):
        ax.axhline(layer, color="0.92", lw=0.8, zorder=0)
    for root, j in tree.root_edges():  # [CLS] reads every node in the last layer
        ax.plot([root, j], [n_layers, height[j]], ls="--", lw=0.8, color="0.6", zorder=1)
    for layer, i, j, score in tree.edges:
        same_level = height[i] == layer
        ax.annotate("", xy=(j, layer), xytext=(i, height[i]), zorder=2,
                    arrowprops={"arrowstyle": "-|>", "color": "tab:blue",
                                "lw": 0.8 + 2.5 * min(score, 1.0),
                                "connectionstyle": "arc3,rad=0.35" if same_level else "arc3",
                                "shrinkA": 6, "shrinkB": 6})
    for j, y in height.items():
        top = j == tree.top
        ax.scatter([j], [y], s=110 if top else 70, zorder=3,
                   color="tab:orange" if top else "tab:blue", edgecolor="black", lw=0.6)
        ax.annotate(tokens[j], (j, y), xytext=(0, 8), textcoords="offset points",
                    ha="center", fontsize=8)
    ax.scatter([0], [n_layers], s=110, marker="s", color="0.3", zorder=3)
    ax.annotate("[CLS] (root)", (0, n_layers), xytext=(0, 8), textcoords="offset points",
                ha="left", fontsize=8)
    ax.set_xticks(range(n), tokens, rotation=90, fontsize=8)
    _mark_planted(ax.get_xticklabels(), planted)
    ax.set_yticks(range(n_layers + 1), [f"layer {layer}" for layer in range(n_layers)] + ["root"])
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_ylim(-0.6, n_layers + 0.7)
    ax.set_title(f"example {row['idx']}: gold {_class_name(label_names, int(row['label']))}, "
                 f"predicted {_class_name(label_names, int(row['pred']))}; "
                 f"{len(tree.edges)} flow edge{'' if len(tree.edges) == 1 else 's'} above "
                 f"tau = {tau}", fontsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    save_figure(figure, path)


def plot_tree_sizes(trees: pd.DataFrame, path: str | os.PathLike) -> None:
    """Tree sizes across the dev set: the distribution of flow edges per tree, and edges
    against the example's length."""
    figure, axes = plt.subplots(1, 2, figsize=(8.5, 3.2))
    edges = trees["edges"].to_numpy()
    axes[0].hist(edges, bins=np.arange(edges.max() + 2) - 0.5, color="tab:blue")
    axes[0].set_xlabel("flow edges in the tree")
    axes[0].set_ylabel("examples")
    # seaborn's strip plot jitters with the global random state: a seeded jitter of its own
    # draws the same figure for the same trees
    jitter = np.random.default_rng(0).uniform(-0.25, 0.25, len(trees))
    x = trees["n_tokens"].to_numpy() + jitter
    for correct, colour in ((True, "tab:blue"), (False, "tab:orange")):
        rows = (trees["correct"] == correct).to_numpy()
        if rows.any():
            axes[1].scatter(x[rows], edges[rows], s=9, color=colour, label=str(correct))
    axes[1].legend(title="correct", fontsize=8)
    axes[1].set_xlabel("tokens in the example")
    axes[1].set_ylabel("flow edges")
    figure.suptitle(f"attribution trees of {len(trees)} dev examples: median "
                    f"{np.median(edges):g} edges, {int((edges == 0).sum())} without any",
                    fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)


def plot_heatmaps(row: pd.Series, attention: np.ndarray, attribution: np.ndarray, layer: int,
                  label_names: list[str], planted: tuple[int, int] | None,
                  path: str | os.PathLike) -> None:
    """The paper's motivating figure for one example and layer: attention next to attribution,
    for the head holding the layer's largest attribution and for all heads together.

    attention, attribution: (H, n, n) of that layer.
    """
    tokens = list(row["tokens"])
    head = int(attribution.reshape(len(attribution), -1).max(axis=1).argmax())
    panels = [
        (attention[head], f"attention, head {head}", "Blues", False),
        (attribution[head], f"attribution, head {head}", "RdBu_r", True),
        (attention.mean(axis=0), "attention, mean of the heads", "Blues", False),
        (attribution.sum(axis=0), "attribution, sum of the heads", "RdBu_r", True),
    ]
    size = max(3.5, 0.28 * len(tokens))
    figure, axes = plt.subplots(2, 2, figsize=(2 * size + 1.5, 2 * size + 1.2))
    for ax, (matrix, title, cmap, centred) in zip(axes.flat, panels, strict=True):
        limit = np.abs(matrix).max() or 1.0
        image = ax.imshow(matrix, cmap=cmap, vmin=-limit if centred else 0, vmax=limit)
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=7)
        _mark_planted(ax.get_xticklabels(), planted)
        _mark_planted(ax.get_yticklabels(), planted)
        ax.set_xlabel("key (read)", fontsize=8)
        ax.set_ylabel("query (reads)", fontsize=8)
        ax.set_title(title, fontsize=9)
        figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    figure.suptitle(f"example {row['idx']}, layer {layer}: gold "
                    f"{_class_name(label_names, int(row['label']))}, predicted "
                    f"{_class_name(label_names, int(row['pred']))}", fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)
