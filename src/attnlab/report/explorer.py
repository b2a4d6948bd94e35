"""The explorer of rule example_views: one self-contained HTML file per task where a reader picks
an example, a layer and a head and sees, side by side, the attention, the attribution, the
attribution tree and, on synthetic tasks, the planted pair.

Everything is in the file: the data as compact JSON (matrices as integers: attention in
hundredths, attribution in hundredths of each layer's largest |attribution|, which the page
multiplies back: one scale for the example would round the lower layers, whose attributions are
often a hundredth of the last layer's, to zero) and a small renderer in plain JavaScript drawing
SVG. No server, no network, no external script: it opens from disk. The URL's query
(?example=<idx>&layer=<l>&head=<h>, head "all" for the heads together) picks what is shown
first, and follows the reader's choice.
"""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np
import pandas as pd

from attnlab.analyses.trees import Tree, planted_pair

# Hundredths: a reader tells colours apart to about that, and integers keep the file small.
LEVELS = 100


def example_data(row: pd.Series, attention: np.ndarray, attribution: np.ndarray, tree: Tree,
                 label_names: list[str]) -> dict[str, Any]:
    """One example of the explorer: a dump row over words, its attention and attribution
    (L, H, W, W) over the same words, and its attribution tree."""
    scale = np.abs(attribution).reshape(len(attribution), -1).max(axis=1)
    scale[scale == 0] = 1.0
    return {
        "idx": int(row["idx"]),
        "tokens": [str(t) for t in row["tokens"]],
        "gold": label_names[int(row["label"])],
        "pred": label_names[int(row["pred"])],
        "planted": list(planted_pair(row) or []),
        "scale": [float(f"{s:.4g}") for s in scale],
        "attention": np.rint(attention * LEVELS).astype(int).tolist(),
        "attribution": np.rint(attribution / scale[:, None, None, None] * LEVELS).astype(
            int).tolist(),
        "top": tree.top,
        "root": tree.root,
        "edges": [[layer, i, j, round(score, 2)] for layer, i, j, score in tree.edges],
    }


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
#controls label {{ margin-right: 1.5em; }}
#panels {{ display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }}
figure {{ margin: 0; }}
figcaption {{ font-size: 0.9em; margin-bottom: 0.3em; }}
svg text {{ font-family: monospace; font-size: 10px; }}
svg text.planted {{ fill: #2ca02c; font-weight: bold; }}
rect.planted {{ fill: none; stroke: #2ca02c; stroke-width: 2; }}
#info {{ margin: 0.6em 0; }}
</style></head><body>
<h1>{title}</h1>
<p>Pick an example, a layer and a head (or all heads: attention averaged, attribution summed).
Attention is grey (0 to 1), attribution red (positive) to blue (negative), scaled by the
largest |attribution| of what is shown; hover a cell for its value. A row is the query (the token
that reads), a column the key (the token read). The tree holds the example's flow edges: an
arrow from the query to the key, drawn thick in the chosen layer. Tokens of the planted pair
(synthetic tasks) are green, and the planted cells framed in green. The URL keeps the choice
(?example=&lt;idx&gt;&amp;layer=&lt;l&gt;&amp;head=&lt;h or all&gt;).</p>
<div id="controls">
<label>example <select id="example"></select></label>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
</div>
<div id="info"></div>
<div id="panels">
<figure><figcaption id="attention-title"></figcaption><svg id="attention"></svg></figure>
<figure><figcaption id="attribution-title"></figcaption><svg id="attribution"></svg></figure>
<figure><figcaption id="tree-title"></figcaption><svg id="tree"></svg></figure>
</div>
<script id="data" type="application/json">{data}</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const LEVELS = DATA.levels, NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

function el(parent, name, attrs, text) {{
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  parent.appendChild(node);
  return node;
}}

function options(select, values, labels, chosen) {{
  select.innerHTML = "";
  values.forEach((v, k) => {{
    const o = document.createElement("option");
    o.value = String(v); o.textContent = labels[k];
    select.appendChild(o);
  }});
  select.value = values.map(String).includes(String(chosen)) ? String(chosen) : String(values[0]);
}}

function matrix(ex, kind, layer, head) {{
  const heads = ex[kind][layer], n = ex.tokens.length;
  const scale = kind === "attention" ? 1 : ex.scale[layer];
  if (head !== "all") return heads[+head].map((row) => row.map((v) => v / LEVELS * scale));
  const out = [];
  for (let i = 0; i < n; i++) {{
    out.push([]);
    for (let j = 0; j < n; j++) {{
      let s = 0;
      for (const h of heads) s += h[i][j];
      out[i].push((kind === "attention" ? s / heads.length : s) / LEVELS * scale);
    }}
  }}
  return out;
}}

function colour(kind, v, limit) {{
  const t = limit > 0 ? Math.min(Math.abs(v) / limit, 1) : 0;
  if (kind === "attention") {{
    const g = Math.round(255 * (1 - t));
    return `rgb(${{g}},${{g}},${{g}})`;
  }}
  const [r, g, b] = v >= 0 ? [214, 39, 40] : [31, 119, 180];
  const mix = (c) => Math.round(255 + (c - 255) * t);
  return `rgb(${{mix(r)}},${{mix(g)}},${{mix(b)}})`;
}}

function heatmap(svg, ex, kind, layer, head) {{
  svg.innerHTML = "";
  const n = ex.tokens.length, cell = Math.max(6, Math.min(18, Math.floor(420 / n)));
  const margin = 8 + 7 * Math.max(...ex.tokens.map((t) => t.length));
  const m = matrix(ex, kind, layer, head);
  const limit = kind === "attention" ? 1 : Math.max(...m.flat().map(Math.abs));
  svg.setAttribute("width", margin + n * cell + 4);
  svg.setAttribute("height", margin + n * cell + 4);
  const planted = new Set(ex.planted);
  ex.tokens.forEach((t, p) => {{
    const cls = planted.has(p) ? "planted" : "";
    el(svg, "text", {{x: margin - 4, y: margin + p * cell + cell * 0.75, "text-anchor": "end",
      class: cls}}, t);
    el(svg, "text", {{x: 0, y: 0, "text-anchor": "start", class: cls,
      transform: `translate(${{margin + p * cell + cell * 0.75}},${{margin - 4}}) rotate(-90)`}},
      t);
  }});
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {{
    const r = el(svg, "rect", {{x: margin + j * cell, y: margin + i * cell, width: cell,
      height: cell, fill: colour(kind, m[i][j], limit), class: "cell", "data-i": i, "data-j": j,
      "data-v": m[i][j].toPrecision(3)}});
    el(r, "title", {{}}, `${{ex.tokens[i]}} reads ${{ex.tokens[j]}}: ${{m[i][j].toPrecision(3)}}`);
  }}
  if (ex.planted.length === 2) {{
    const [a, b] = ex.planted;
    for (const [i, j] of [[a, b], [b, a]]) el(svg, "rect", {{x: margin + j * cell,
      y: margin + i * cell, width: cell, height: cell, class: "planted"}});
  }}
}}

function tree(svg, ex, layer) {{
  svg.innerHTML = "";
  const n = ex.tokens.length, L = ex.attention.length, dx = Math.max(22, Math.min(48, 700 / n));
  const dy = 44, left = 92, top = 24, width = left + n * dx + 20, height = top + (L + 1) * dy + 70;
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  const X = (p) => left + p * dx + dx / 2, Y = (l) => top + (L - l) * dy;
  const marker = el(el(svg, "defs", {{}}), "marker", {{id: "arrow", viewBox: "0 0 10 10",
    refX: 16, markerUnits: "userSpaceOnUse", refY: 5, markerWidth: 8, markerHeight: 8,
    orient: "auto-start-reverse"}});
  el(marker, "path", {{d: "M 0 0 L 10 5 L 0 10 z", fill: "#555"}});
  for (let l = 0; l < L; l++) {{
    el(svg, "line", {{x1: left, x2: width - 10, y1: Y(l), y2: Y(l),
      stroke: l === +layer ? "#bbb" : "#eee"}});
    el(svg, "text", {{x: 4, y: Y(l) + 4}}, `layer ${{l}}`);
  }}
  el(svg, "text", {{x: 4, y: Y(L) + 4}}, "root");
  const height_ = {{}};
  if (ex.top !== null) height_[ex.top] = L - 1;
  for (const [l, , j] of ex.edges) height_[j] = l;
  for (const p of Object.keys(height_)) el(svg, "line", {{x1: X(ex.root), y1: Y(L), x2: X(+p),
    y2: Y(height_[p]), stroke: "#aaa", "stroke-dasharray": "4 3"}});
  for (const [l, i, j, score] of ex.edges) {{
    const chosen = l === +layer;
    const [x1, y1, x2, y2] = [X(i), Y(height_[i]), X(j), Y(l)];
    // an edge within one row (the algorithm allows it) bends, so that it stays visible
    const bend = y1 === y2 ? ` Q ${{(x1 + x2) / 2}} ${{y1 - 0.3 * Math.abs(x2 - x1)}}` : " L";
    const e = el(svg, "path", {{d: `M ${{x1}} ${{y1}}${{bend}} ${{x2}} ${{y2}}`, fill: "none",
      "marker-end": "url(#arrow)", stroke: chosen ? "#1f77b4" : "#9ecae1",
      "stroke-width": (chosen ? 2 : 1) + 3 * Math.min(score, 1),
      class: chosen ? "edge chosen" : "edge", "data-layer": l, "data-from": i, "data-to": j}});
    el(e, "title", {{}}, `layer ${{l}}: ${{ex.tokens[i]}} reads ${{ex.tokens[j]}} (${{score}})`);
  }}
  for (const [p, l] of Object.entries(height_)) {{
    el(svg, "circle", {{cx: X(+p), cy: Y(l), r: +p === ex.top ? 7 : 5,
      fill: +p === ex.top ? "#ff7f0e" : "#1f77b4", stroke: "black"}});
  }}
  el(svg, "rect", {{x: X(ex.root) - 6, y: Y(L) - 6, width: 12, height: 12, fill: "#444"}});
  const planted = new Set(ex.planted);
  ex.tokens.forEach((t, p) => el(svg, "text", {{x: 0, y: 0,
    class: planted.has(p) ? "planted" : "",
    transform: `translate(${{X(p) + 4}},${{Y(0) + 14}}) rotate(60)`}}, t));
  if (!ex.edges.length) {{
    el(svg, "text", {{x: left + 60, y: top + dy / 2}}, "no flow edge above tau");
  }}
}}

function draw() {{
  const ex = DATA.examples.find((e) => String(e.idx) === $("example").value);
  const layer = $("layer").value, head = $("head").value;
  const which = head === "all" ? "all heads" : `head ${{head}}`;
  $("info").textContent = `example ${{ex.idx}}: gold ${{ex.gold}}, predicted ${{ex.pred}}` +
    (ex.planted.length ? "; planted pair " + ex.planted.map((p) => ex.tokens[p]).join(" – ") : "");
  $("attention-title").textContent = `attention, layer ${{layer}}, ${{which}}` +
    (head === "all" ? " (mean)" : "");
  $("attribution-title").textContent = `attribution, layer ${{layer}}, ${{which}}` +
    (head === "all" ? " (sum)" : "") +
    ` (the layer's largest |attribution|: ${{ex.scale[+layer]}})`;
  $("tree-title").textContent = `attribution tree, ${{ex.edges.length}} flow edges; ` +
    `layer ${{layer}}'s edges drawn thick`;
  heatmap($("attention"), ex, "attention", +layer, head);
  heatmap($("attribution"), ex, "attribution", +layer, head);
  tree($("tree"), ex, layer);
  const query = new URLSearchParams({{example: ex.idx, layer, head}});
  history.replaceState(null, "", "?" + query.toString());
}}

function start() {{
  if (!DATA.examples.length) {{ $("info").textContent = "no example was sampled"; return; }}
  const query = new URLSearchParams(location.search);
  options($("example"), DATA.examples.map((e) => e.idx),
    DATA.examples.map((e) => `${{e.idx}} (gold ${{e.gold}}, predicted ${{e.pred}})`),
    query.get("example"));
  const L = DATA.examples[0].attention.length, H = DATA.examples[0].attention[0].length;
  const layers = [...Array(L).keys()], heads = [...Array(H).keys()];
  options($("layer"), layers, layers.map(String), query.get("layer") ?? L - 1);
  options($("head"), [...heads, "all"], [...heads.map(String), "all heads"],
    query.get("head") ?? "all");
  for (const id of ["example", "layer", "head"]) $(id).addEventListener("change", draw);
  draw();
}}
start();
</script>
</body></html>
"""


def explorer_page(title: str, examples: list[dict[str, Any]]) -> str:
    """The self-contained explorer of `examples` (`example_data`)."""
    data = json.dumps({"levels": LEVELS, "examples": examples}, separators=(",", ":"))
    # inside <script>, "</" would end the element early: JSON allows "<\\/" instead
    return _PAGE.format(title=html.escape(title), data=data.replace("</", "<\\/"))
