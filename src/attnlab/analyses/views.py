"""Per-example views of attribution: attention next to attribution for one layer (the paper's
motivating figure), and one self-contained HTML page per task that colours every token, layer
by layer, by how much attribution flows through it (the view the seed notebook was after).

The dumps keep no full matrices by default, so the few sampled examples are attributed again
with the engine and the dumps' own settings (their per-head maxima are checked against the
dump, to the engine's float tolerance).
"""

from __future__ import annotations

import base64
import html
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from attnlab.analyses.trees import planted_pair, sample_examples
from attnlab.data import tasks
from attnlab.data.dumps import read_task_dump
from attnlab.engine.attribution import PANEL_NODES, attribute, engine_options
from attnlab.engine.examples import encoded_frame
from attnlab.engine.models import load_classifier
from attnlab.plumbing.device import attribution_batch_size
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.outputs import atomic_path
from attnlab.report.flow_figures import plot_heatmaps

log = logging.getLogger(__name__)


def token_flow(layers: np.ndarray) -> np.ndarray:
    """Attribution flowing through each token in each layer, (L, n) from head-summed layer
    matrices (L, n, n): the attribution of every interaction the token takes part in, as the
    query (row) or as the key (column), its interaction with itself left out."""
    diagonal = np.diagonal(layers, axis1=1, axis2=2)
    return layers.sum(axis=2) + layers.sum(axis=1) - 2 * diagonal


def heatmap_layer(layer: int | None, attr: np.ndarray) -> int:
    """The layer to draw for an example with attributions `attr` (L, H, n, n): `layer` counted
    from 0, or from the end when negative (-1 is the last layer); None: the layer holding the
    example's largest attribution entry."""
    n_layers = len(attr)
    if layer is None:
        return int(attr.reshape(n_layers, -1).max(axis=1).argmax())
    if not -n_layers <= layer < n_layers:
        raise ConfigError(f"trees.heatmap_layer: {layer} is not a layer of the model "
                         f"(0..{n_layers - 1}, or -{n_layers}..-1 from the end)")
    return layer % n_layers


def _colour(value: float, scale: float) -> str:
    """Green for positive flow, red for negative, stronger with |value| / scale."""
    alpha = min(abs(value) / scale, 1.0) if scale > 0 else 0.0
    rgb = "0, 150, 60" if value >= 0 else "200, 30, 30"
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
    probs = ", ".join(f"{html.escape(name)} {p:.3f}" for name, p in
                      zip(label_names, row["probs"], strict=True))
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


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; }}
td, th {{ padding: 0.25em 0.4em; border: 1px solid #ddd; font-family: monospace; }}
th {{ text-align: right; font-weight: normal; color: #555; }}
td.planted {{ outline: 2px solid #d62728; }}
img {{ max-width: 100%; display: block; margin: 0.5em 0; }}
section {{ border-top: 1px solid #aaa; margin-top: 2em; }}
</style></head><body>
<h1>{title}</h1>
<p>Each token is coloured by the attribution flowing through it in each layer: the sum of the
head-summed attribution of every interaction it takes part in, as the reading query or as the
read key (its interaction with itself left out). Green is positive, red negative; the colour
scale is each example's largest absolute value, and hovering a token shows its value. Tokens
of the planted pair (synthetic tasks) are outlined in red.</p>
{sections}
</body></html>
"""


def example_views(
    model_dir: str | os.PathLike,
    *,
    dev_path: str | os.PathLike,
    dump_paths: list[str | os.PathLike],
    tree_figures: str | os.PathLike,
    spec: tasks.TaskSpec,
    trees_cfg: dict[str, Any],
    attribution_cfg: dict[str, Any],
    model_cfg: dict[str, Any],
    seed: int,
    device: torch.device,
    out_dir: str | os.PathLike,
) -> None:
    """Heatmaps and the HTML page (index.html, with every figure embedded) of the sampled
    examples of a task, written into the folder `out_dir` as a whole."""
    dump, _ = read_task_dump(dump_paths)
    chosen = sample_examples(dump["idx"].tolist(), trees_cfg["examples"],
                             trees_cfg["example_idx"], seed)
    rows = dump[dump["idx"].isin(chosen)].reset_index(drop=True)
    dev = tasks.load_split(dev_path, spec)
    dev = dev.set_index("idx", drop=False) if "idx" in dev else dev
    if len(rows):  # trees.examples may be 0 and example_idx empty: an empty page
        model, tokenizer = load_classifier(model_dir, device)
        encoded = encoded_frame(dev.loc[rows["idx"]], spec, tokenizer, model_cfg)
        rows_per_pass = attribution_batch_size(
            attribution_cfg["batch_size"], model.config, encoded["input_ids"].shape[1], device,
            panels=attribution_cfg["max_steps"] // PANEL_NODES)
        result = attribute(model, {k: v.to(device) for k, v in encoded.items()},
                           attribution_cfg["target"],
                           **{**engine_options(attribution_cfg), "batch_size": rows_per_pass})
    label_names = list(spec.label_names)
    sections = []
    with atomic_path(out_dir) as folder:
        folder.mkdir()
        for b, row in rows.iterrows():
            n = int(row["n_tokens"])
            attr = result.attr[b, :, :, :n, :n].double().cpu().numpy()  # (L, H, n, n)
            attention = result.attention[b, :, :, :n, :n].double().cpu().numpy()
            stored = np.asarray(row["attr_max"]).reshape(attr.shape[:2])
            layer = heatmap_layer(trees_cfg["heatmap_layer"], attr)
            log.info("example %d: recomputed per-head maxima differ from the dump by at most "
                     "%.2g; heatmaps of layer %d", row["idx"],
                     np.abs(attr.max(axis=(2, 3)) - stored).max(), layer)
            heatmap = folder / f"heatmap_{row['idx']}.png"
            plot_heatmaps(row, attention[layer], attr[layer], layer, label_names,
                          planted_pair(row), heatmap)
            tree = Path(tree_figures) / f"tree_{row['idx']}.png"
            sections.append(example_section(row, token_flow(attr.sum(axis=1)), label_names,
                                            [heatmap, tree]))
        title = f"attribution flow through the tokens: task {spec.name}"
        (folder / "index.html").write_text(
            PAGE.format(title=html.escape(title), sections="\n".join(sections)))
    log.info("views of %d examples (idx %s)", len(rows), chosen)
