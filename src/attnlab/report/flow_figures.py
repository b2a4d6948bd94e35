"""Figures of the information-flow stages: attribution trees, tree sizes,
attention-vs-attribution heatmaps, and the HTML page of the attribution flowing through every
token (rule example_views)."""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlab.analyses.trees import Tree, planted_pair
from attnlab.report.figures import note, note_if_flat, save_figure

# The planted pair is marked in a colour no map of these views uses: attribution is red
# (positive) to blue (negative), attention grey, tree nodes blue and orange.
PLANTED_COLOUR = "tab:green"
ATTENTION_CMAP = "Greys"
ATTRIBUTION_CMAP = "RdBu_r"
# Per-example figures grow with the tokens up to this many inches a side (the figure checks'
# pixel bounds), their labels shrinking to fit.
MAX_SIDE_INCHES = 13.5


def _token_fontsize(n_tokens: int, inches: float) -> float:
    """A tick label size at which n_tokens labels fit side by side in `inches`."""
    return max(3.0, min(8.0, 0.75 * 72 * inches / max(n_tokens, 1)))


def _class_name(label_names: list[str], index: int) -> str:
    return label_names[index] if 0 <= index < len(label_names) else f"token {index}"


def _mark_planted(labels, planted: tuple[int, int] | None) -> None:
    for position, label in enumerate(labels):
        if planted is not None and position in planted:
            label.set_color(PLANTED_COLOUR)
            label.set_fontweight("bold")


def plot_tree(row: pd.Series, tree: Tree, n_layers: int, label_names: list[str], tau: float,
              planted: tuple[int, int] | None, path: str | os.PathLike) -> None:
    """One example's (dump row's) attribution tree as a layered graph: x = token position,
    y = the layer in which a node is read: a flow edge of layer l (query i reads key j, as in
    the edges table) ends at its key j on the row "layer l" and is labelled l, and the top
    node sits on the last layer's row, where the root ([CLS]; a decoder's last token) reads
    it. Edge width grows with
    the normalised score; planted tokens are green."""
    tokens = list(row["tokens"])
    n = len(tokens)
    height = {tree.top: n_layers - 1} if tree.top is not None else {}
    for layer, _, j, _ in tree.edges:
        height[j] = layer
    width = min(max(6.0, 0.5 * n), MAX_SIDE_INCHES)
    fontsize = _token_fontsize(n, width)
    figure, ax = plt.subplots(figsize=(width, 1.2 + 0.9 * (n_layers + 1)))
    for layer in range(n_layers):
        ax.axhline(layer, color="0.92", lw=0.8, zorder=0)
    for root, j in tree.root_edges():  # the root reads every node in the last layer
        ax.plot([root, j], [n_layers, height[j]], ls="--", lw=0.8, color="0.6", zorder=1)
    for layer, i, j, score in tree.edges:
        same_level = height[i] == layer
        ax.annotate("", xy=(j, layer), xytext=(i, height[i]), zorder=2,
                    arrowprops={"arrowstyle": "-|>", "color": "tab:blue",
                                "lw": 0.8 + 2.5 * min(score, 1.0),
                                "connectionstyle": "arc3,rad=0.35" if same_level else "arc3",
                                "shrinkA": 6, "shrinkB": 6})
        # the edge's layer, written beside its key end: a reader of the drawing need not
        # infer it from which rows the arrow spans
        ax.annotate(str(layer), xy=(j, layer), xytext=(7, -9), textcoords="offset points",
                    fontsize=7, color="tab:blue", gid=f"edge-layer {layer} {i} {j}")
    for j, y in height.items():
        top = j == tree.top
        ax.scatter([j], [y], s=110 if top else 70, zorder=3,
                   color="tab:orange" if top else "tab:blue", edgecolor="black", lw=0.6)
        ax.annotate(tokens[j], (j, y), xytext=(0, 8), textcoords="offset points",
                    ha="center", fontsize=fontsize)
    ax.scatter([tree.root], [n_layers], s=110, marker="s", color="0.3", zorder=3)
    ax.annotate(f"{tokens[tree.root]} (root)", (tree.root, n_layers), xytext=(0, 8),
                textcoords="offset points", ha="left" if tree.root == 0 else "right",
                fontsize=8)
    ax.set_xticks(range(n), tokens, rotation=90, fontsize=fontsize)
    _mark_planted(ax.get_xticklabels(), planted)
    ax.set_yticks(range(n_layers + 1),
                  [f"read in layer {layer}" for layer in range(n_layers)] + ["root"])
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_ylim(-0.6, n_layers + 0.7)
    ax.set_title(f"example {row['idx']}: gold {_class_name(label_names, int(row['label']))}, "
                 f"predicted {_class_name(label_names, int(row['pred']))}; "
                 f"{len(tree.edges)} flow edge{'' if len(tree.edges) == 1 else 's'} above "
                 f"tau = {tau} (arrow: query reads key, labelled by its layer)", fontsize=9)
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
    axes[1].legend(title="correct", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    note_if_flat(axes[1], edges, "flow edges per tree")
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
    """The paper's motivating figure for one example and layer: attention (grey) next to
    attribution (red positive, blue negative), for the head holding the layer's largest
    attribution and for all heads together; every panel names its layer.

    attention, attribution: (L, H, n, n), every layer; `layer` is the one drawn.
    """
    tokens = list(row["tokens"])
    attention, attribution = attention[layer], attribution[layer]
    head = int(attribution.reshape(len(attribution), -1).max(axis=1).argmax())
    panels = [
        (attention[head], f"attention, layer {layer}, head {head}", ATTENTION_CMAP, False),
        (attribution[head], f"attribution, layer {layer}, head {head}", ATTRIBUTION_CMAP, True),
        (attention.mean(axis=0), f"attention, layer {layer}, mean of the heads",
         ATTENTION_CMAP, False),
        (attribution.sum(axis=0), f"attribution, layer {layer}, sum of the heads",
         ATTRIBUTION_CMAP, True),
    ]
    size = min(max(3.5, 0.28 * len(tokens)), (MAX_SIDE_INCHES - 1.5) / 2)
    fontsize = _token_fontsize(len(tokens), size)
    figure, axes = plt.subplots(2, 2, figsize=(2 * size + 1.5, 2 * size + 1.2))
    for ax, (matrix, title, cmap, centred) in zip(axes.flat, panels, strict=True):
        limit = np.abs(matrix).max() or 1.0
        image = ax.imshow(matrix, cmap=cmap, vmin=-limit if centred else 0, vmax=limit)
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=fontsize)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=fontsize)
        _mark_planted(ax.get_xticklabels(), planted)
        _mark_planted(ax.get_yticklabels(), planted)
        ax.set_xlabel("key (read)", fontsize=8)
        ax.set_ylabel("query (reads)", fontsize=8)
        ax.set_title(title, fontsize=9)
        if not np.ptp(matrix):
            note(ax, f"every entry {matrix.flat[0]:.3g}", fontsize=8)
        figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    planted_note = "; planted pair in green" if planted is not None else ""
    figure.suptitle(f"example {row['idx']}, layer {layer}: gold "
                    f"{_class_name(label_names, int(row['label']))}, predicted "
                    f"{_class_name(label_names, int(row['pred']))}{planted_note}", fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)


def _colour(value: float, scale: float) -> str:
    """Red for positive flow, blue for negative (as the attribution heatmaps), stronger with
    |value| / scale."""
    alpha = min(abs(value) / scale, 1.0) if scale > 0 else 0.0
    rgb = "214, 39, 40" if value >= 0 else "31, 119, 180"
    return f"rgba({rgb}, {alpha:.3f})"
def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(path.name)}">'


def example_section(row: pd.Series, flow: np.ndarray, label_names: list[str],
                    images: list[Path]) -> str:
    """The HTML of one example: a table with one row per layer (the last on top) whose cells
    are the tokens coloured by their flow (scaled by the example's largest |flow|), then the
    example's figures."""
    tokens = [html.escape(str(t)) for t in row["tokens"]]
    planted = planted_pair(row) or ()
    scale = float(np.abs(flow).max())
    # a decoder's row keeps the target token's probability only (its probs are null)
    probs = (f"p({html.escape(label_names[int(row['target'])])}) {row['f_full']:.3f}"
             if row["probs"] is None else
             ", ".join(f"{html.escape(name)} {p:.3f}" for name, p in
                       zip(label_names, row["probs"], strict=True)))
    lines = [f"<section><h2>example {row['idx']}</h2>",
             f"<p>gold <b>{html.escape(label_names[int(row['label'])])}</b>, predicted "
             f"<b>{html.escape(label_names[int(row['pred'])])}</b> ({probs})</p>",
             "<table>"]
    for layer in range(len(flow) - 1, -1, -1):
        cells = "".join(
            f'<td style="background:{_colour(v, scale)}" title="layer {layer}, position {p}: '
            f'{v:.4g}"{" class=planted" if p in planted else ""}>{t}</td>'
            for p, (t, v) in enumerate(zip(tokens, flow[layer], strict=True)))
        lines.append(f"<tr><th>layer {layer}</th>{cells}</tr>")
    lines.append("</table>")
    lines += [_image(path) for path in images]
    lines.append("</section>")
    return "\n".join(lines)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; }}
td, th {{ padding: 0.25em 0.4em; border: 1px solid #ddd; font-family: monospace; }}
th {{ text-align: right; font-weight: normal; color: #555; }}
td.planted {{ outline: 2px solid #2ca02c; }}
img {{ max-width: 100%; display: block; margin: 0.5em 0; }}
section {{ border-top: 1px solid #aaa; margin-top: 2em; }}
</style></head><body>
<h1>{title}</h1>
<p>Each token is coloured by the attribution flowing through it in each layer: the sum of the
head-summed attribution of every interaction it takes part in, as the reading query or as the
read key (its interaction with itself left out). Red is positive, blue negative, as in the
attribution heatmaps; the colour scale is each example's largest absolute value, and hovering a
token shows its value. Tokens of the planted pair (synthetic tasks) are outlined in green.
<a href="explorer.html">The explorer</a> shows any example's attention, attribution and tree
for any layer and head.</p>{words}
{sections}
</body></html>
"""


# said only where it happened, so a page of a word-level tokenizer's tokens is as it was
_MERGED_WORDS = """
<p>A word the tokenizer split into pieces is shown whole, as one cell ("unsentimental", not "un
##sen ##time ##ntal"): its attribution is the sum over its pieces' interactions, and the
heatmaps' attention is summed over a key word's pieces and averaged over a query word's (Clark
et al. 2019).</p>"""


def flow_page(title: str, sections: list[str], merged_words: bool = False) -> str:
    """The self-contained HTML page of examples' sections (`example_section`); `merged_words`:
    some example shows a word merged from the tokenizer's pieces."""
    return _PAGE.format(title=html.escape(title), sections="\n".join(sections),
                        words=_MERGED_WORDS if merged_words else "")

