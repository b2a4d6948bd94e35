"""The explorer: one self-contained HTML file where a reader picks an example, a layer and a head
and sees, side by side, the attention (and the effective attention, where it was computed), the
attribution, the interaction methods' maps of that layer (where the run scored the example),
the attribution tree and, on synthetic tasks, the planted pair; below them all heads of every
layer as small multiples (as bertviz's model view), any of which a click opens. Rule
example_views writes one per task, and `attnlab explain` one of the texts it explains.

Colours tell the values: every heatmap has a colour bar labelled with the value its full colour
stands for, which is either the largest |value| of the layer shown or the largest of all layers
(the reader's choice), never the largest of whatever is on screen. Its first view is the layer
and head holding the example's largest attribution.

Everything is in the file: the data as JSON, every matrix as float16 (the base64 of its
little-endian bytes) divided by its layer's largest |value|, which is stored beside it as a
float. A value thus keeps float16's 11 significant bits relative to its layer's largest, however
small the layer's values are (float16 alone would make subnormals of a layer whose largest
attribution is 4e-7). A small renderer in plain JavaScript draws SVG (the overview: canvas). No
server, no network, no external script: it opens from disk. The URL's query
(?example=<idx>&layer=<l>&head=<h>&scale=<layer|all>, head "all" for the heads together) picks
what is shown first, and follows the reader's choice.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attnlab.analyses.trees import Tree, planted_pair

# How the heads of a map are taken together when the reader picks "all heads": attribution
# adds up over heads (Hao et al.'s head-summed matrices), attention-like maps average.
SUMMED = ("attribution",)


def encoded_map(values: np.ndarray, combine: str) -> dict[str, Any]:
    """A map (L, H, W, W) as the page stores it: each layer divided by its largest |value|
    (`scale`, 1 for a layer of zeros) in float16; whether any value is negative (drawn red to
    blue, else white to black); `combine`, how "all heads" takes the heads together."""
    scale = np.abs(values).reshape(len(values), -1).max(axis=1)
    scale[scale == 0] = 1.0
    halves = (values / scale[:, None, None, None]).astype("<f2")
    return {"scale": scale.tolist(), "heads": values.shape[1], "combine": combine,
            "signed": bool((values < 0).any()),
            "data": base64.b64encode(halves.tobytes()).decode("ascii")}


def example_data(row: Mapping[str, Any], maps: Mapping[str, np.ndarray], tree: Tree,
                 label_names: Sequence[str] | Mapping[int, str],
                 methods: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
    """One example of the explorer: a dump row over words (idx, tokens, pred, and the label and
    planted pair where known: a null label is shown as none), its maps (name -> (L, H, W, W)
    over the same words: "attention", "attribution" (where computed) and others such as
    "effective attention"), the interaction methods' maps of it (method -> (L, W, W)) and
    its attribution tree."""
    # the first view: the largest attribution (`attnlab explain` of another method: attention)
    first = maps.get("attribution", next(iter(maps.values())))
    layer, head = np.unravel_index(first.argmax(), first.shape)[:2]
    label = row.get("label")
    return {
        "idx": int(row["idx"]),
        "tokens": [str(t) for t in row["tokens"]],
        "gold": None if label is None or np.isnan(label) else label_names[int(label)],
        "pred": label_names[int(row["pred"])],
        "planted": list(planted_pair(row) or []),
        "start": [int(layer), int(head)],
        "maps": {name: encoded_map(values, "sum" if name in SUMMED else "mean")
                 for name, values in maps.items()},
        "methods": {name: encoded_map(values[:, None], "mean")
                    for name, values in (methods or {}).items()},
        "top": tree.top,
        "root": tree.root,
        "edges": [[layer, i, j, round(score, 2)] for layer, i, j, score in tree.edges],
    }


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
#controls label {{ margin-right: 1.5em; }}
.panels {{ display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }}
figure {{ margin: 0; }}
figcaption {{ font-size: 0.9em; margin-bottom: 0.3em; max-width: 36em; }}
svg text {{ font-family: monospace; font-size: 10px; }}
svg text.planted {{ fill: #2ca02c; font-weight: bold; }}
rect.planted {{ fill: none; stroke: #2ca02c; stroke-width: 2; }}
#info {{ margin: 0.6em 0; }}
#overview {{ display: grid; gap: 3px; justify-content: start; }}
#overview canvas {{ border: 1px solid #ccc; cursor: pointer; image-rendering: pixelated; }}
#overview canvas.chosen {{ border: 2px solid #ff7f0e; }}
#overview span {{ font-size: 0.8em; align-self: center; }}
</style></head><body>
<h1>{title}</h1>
<p>Pick an example, a layer and a head (or all heads: attention averaged, attribution summed).
A row is the query (the token that reads), a column the key (the token read). Maps without
negative values are white (0) to black, the others blue (negative) through white (0) to red
(positive); the colour bar under each map gives the value of its full colour: the largest
|value| of the layer shown, or of all layers (the scale choice), so a pale head is one whose
values are small beside the layer's. Hover a cell for its value. The tree holds the example's
flow edges: an arrow from the query to the key, drawn thick in the chosen layer. Tokens of the
planted pair (synthetic tasks) are green, and the planted cells framed in green. Below, every
head of every layer at once: click one to open it. The URL keeps the choice
(?example=&lt;idx&gt;&amp;layer=&lt;l&gt;&amp;head=&lt;h or all&gt;&amp;scale=&lt;layer or
all&gt;).</p>
<div id="controls">
<label>example <select id="example"></select></label>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
<label>colour scale <select id="scale"><option value="layer">the layer's largest</option>
<option value="all">the largest of all layers</option></select></label>
</div>
<div id="info"></div>
<div class="panels" id="maps"></div>
<h2 id="methods-title"></h2>
<div class="panels" id="methods"></div>
<h2>Every head <label>of <select id="overview-map"></select></label></h2>
<div id="overview"></div>
<script id="data" type="application/json">{data}</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const decoded = new Map();

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

// float16 (IEEE half, little-endian) to numbers; the stored values lie within [-1, 1]
function halves(base64) {{
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer), out = new Float64Array(bytes.length / 2);
  for (let k = 0; k < out.length; k++) {{
    const h = view.getUint16(2 * k, true), e = (h >> 10) & 31, f = h & 1023;
    const v = e === 0 ? f * 2 ** -24 : (1 + f / 1024) * 2 ** (e - 15);
    out[k] = h & 32768 ? -v : v;
  }}
  return out;
}}

// a map's values (L * H * n * n), each layer multiplied back by its scale; decoded once
function values(ex, kind, name) {{
  const key = `${{ex.idx}}/${{kind}}/${{name}}`;
  if (!decoded.has(key)) {{
    const map = ex[kind][name], out = halves(map.data), per = out.length / map.scale.length;
    for (let k = 0; k < out.length; k++) out[k] *= map.scale[Math.floor(k / per)];
    decoded.set(key, out);
  }}
  return decoded.get(key);
}}

// the n x n matrix of one head, or of all heads taken together as the map says
function matrix(ex, kind, name, layer, head) {{
  const map = ex[kind][name], v = values(ex, kind, name), n = ex.tokens.length;
  const heads = map.heads === 1 ? [0] : head === "all" ? [...Array(map.heads).keys()] : [+head];
  const out = [];
  for (let i = 0; i < n; i++) {{
    out.push([]);
    for (let j = 0; j < n; j++) {{
      let s = 0;
      for (const h of heads) s += v[((layer * map.heads + h) * n + i) * n + j];
      out[i].push(map.combine === "mean" ? s / heads.length : s);
    }}
  }}
  return out;
}}

// the value the full colour stands for: the largest |value| of the layer (every head of it,
// or the heads taken together), or of all layers
function limit(ex, kind, name, layer, head, scope) {{
  const map = ex[kind][name];
  const layers = scope === "all" ? [...Array(map.scale.length).keys()] : [layer];
  const heads = head === "all" || map.heads === 1 ? ["all"] : [...Array(map.heads).keys()];
  let largest = 0;
  for (const l of layers) for (const h of heads) {{
    for (const row of matrix(ex, kind, name, l, h)) for (const x of row) {{
      largest = Math.max(largest, Math.abs(x));
    }}
  }}
  return largest;
}}

function colour(signed, v, top) {{
  const t = top > 0 ? Math.min(Math.abs(v) / top, 1) : 0;
  if (!signed) {{
    const g = Math.round(255 * (1 - t));
    return `rgb(${{g}},${{g}},${{g}})`;
  }}
  const [r, g, b] = v >= 0 ? [214, 39, 40] : [31, 119, 180];
  const mix = (c) => Math.round(255 + (c - 255) * t);
  return `rgb(${{mix(r)}},${{mix(g)}},${{mix(b)}})`;
}}

// three significant digits, in exponent form below a thousandth (0.00000289 reads badly)
const number = (v) => v === 0 || Math.abs(v) >= 1e-3 ? Number(v.toPrecision(3)).toString() :
  v.toExponential(2);

function colourbar(svg, x, y, width, signed, top, scope) {{
  const id = `bar-${{svg.id}}`;
  const gradient = el(el(svg, "defs", {{}}), "linearGradient", {{id}});
  const stops = signed ? [-1, -0.5, 0, 0.5, 1] : [0, 0.5, 1];
  stops.forEach((s, k) => el(gradient, "stop", {{offset: k / (stops.length - 1),
    "stop-color": colour(signed, s, 1)}}));
  const bar = el(svg, "g", {{class: "colourbar", "data-limit": top, "data-scope": scope}});
  el(bar, "rect", {{x, y, width, height: 10, fill: `url(#${{id}})`, stroke: "#999"}});
  const labels = signed ? [[x, "start", number(-top)], [x + width / 2, "middle", "0"],
    [x + width, "end", number(top)]] : [[x, "start", "0"], [x + width, "end", number(top)]];
  for (const [lx, anchor, text] of labels) {{
    el(bar, "text", {{x: lx, y: y + 22, "text-anchor": anchor, class: "bar-label"}}, text);
  }}
}}

function heatmap(svg, ex, kind, name, layer, head, scope, largest) {{
  svg.innerHTML = "";
  const n = ex.tokens.length, cell = Math.max(4, Math.min(largest, Math.floor(420 / n)));
  const margin = 8 + 7 * Math.max(...ex.tokens.map((t) => t.length));
  const m = matrix(ex, kind, name, layer, head), map = ex[kind][name];
  const top = limit(ex, kind, name, layer, head, scope);
  const side = margin + n * cell;
  svg.setAttribute("width", Math.max(side, margin + 160) + 8);
  svg.setAttribute("height", side + 40);
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
      height: cell, fill: colour(map.signed, m[i][j], top), class: "cell", "data-i": i,
      "data-j": j, "data-v": m[i][j]}});
    el(r, "title", {{}}, `${{ex.tokens[i]}} reads ${{ex.tokens[j]}}: ${{m[i][j].toPrecision(4)}}`);
  }}
  if (ex.planted.length === 2) {{
    const [a, b] = ex.planted;
    for (const [i, j] of [[a, b], [b, a]]) el(svg, "rect", {{x: margin + j * cell,
      y: margin + i * cell, width: cell, height: cell, class: "planted"}});
  }}
  colourbar(svg, margin, side + 8, Math.max(n * cell, 160), map.signed, top, scope);
}}

function tree(svg, ex, layer) {{
  svg.innerHTML = "";
  const n = ex.tokens.length, L = ex.maps.attention.scale.length;
  const dx = Math.max(22, Math.min(48, 700 / n));
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

// one figure per map: a caption and an SVG, whose id names the map
function figure(parent, id) {{
  const fig = document.createElement("figure");
  const caption = document.createElement("figcaption");
  caption.id = `${{id}}-title`;
  fig.appendChild(caption);
  const svg = el(fig, "svg", {{id}});
  parent.appendChild(fig);
  return [caption, svg];
}}

const slug = (name) => name.replace(/[^A-Za-z0-9]+/g, "-");

function overview(ex, name, layer, head, scope) {{
  const box = $("overview"), map = ex.maps[name], n = ex.tokens.length;
  const H = map.heads, L = map.scale.length, px = Math.max(1, Math.floor(84 / n));
  box.innerHTML = "";
  box.style.gridTemplateColumns = `5em repeat(${{H}}, ${{n * px + 4}}px)`;
  for (let l = 0; l < L; l++) {{
    const label = document.createElement("span");
    label.textContent = `layer ${{l}}`;
    box.appendChild(label);
    const top = limit(ex, "maps", name, l, 0, scope);
    for (let h = 0; h < H; h++) {{
      const canvas = document.createElement("canvas");
      canvas.width = canvas.height = n * px;
      canvas.dataset.layer = l; canvas.dataset.head = h;
      canvas.title = `layer ${{l}}, head ${{h}}`;
      if (l === layer && String(h) === String(head)) canvas.className = "chosen";
      const ctx = canvas.getContext("2d"), m = matrix(ex, "maps", name, l, h);
      for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {{
        ctx.fillStyle = colour(map.signed, m[i][j], top);
        ctx.fillRect(j * px, i * px, px, px);
      }}
      canvas.addEventListener("click", () => {{
        $("layer").value = String(l); $("head").value = String(h); draw();
      }});
      box.appendChild(canvas);
    }}
  }}
}}

function draw() {{
  const ex = DATA.examples.find((e) => String(e.idx) === $("example").value);
  const layer = +$("layer").value, head = $("head").value, scope = $("scale").value;
  const which = head === "all" ? "all heads" : `head ${{head}}`;
  const scale = scope === "all" ? "the largest |value| of all layers" :
    `the largest |value| of layer ${{layer}}`;
  $("info").textContent = `example ${{ex.idx}}: ` +
    (ex.gold === null ? "" : `gold ${{ex.gold}}, `) + `predicted ${{ex.pred}}` +
    (ex.planted.length ? "; planted pair " + ex.planted.map((p) => ex.tokens[p]).join(" – ") : "");
  const maps = $("maps");
  maps.innerHTML = "";
  for (const [name, map] of Object.entries(ex.maps)) {{
    const [caption, svg] = figure(maps, `map-${{slug(name)}}`);
    caption.textContent = `${{name}}, layer ${{layer}}, ${{which}}` +
      (head === "all" ? ` (${{map.combine}})` : "") + `; colour scale: ${{scale}}`;
    heatmap(svg, ex, "maps", name, layer, head, scope, 18);
  }}
  const [caption, svg] = figure(maps, "tree");
  caption.textContent = `attribution tree, ${{ex.edges.length}} flow edges; ` +
    `layer ${{layer}}'s edges drawn thick`;
  tree(svg, ex, layer);
  const methods = $("methods");
  methods.innerHTML = "";
  $("methods-title").textContent = Object.keys(ex.methods).length ?
    `The interaction methods' scores of layer ${{layer}} (every token pair)` : "";
  for (const name of Object.keys(ex.methods)) {{
    const [title, svg] = figure(methods, `method-${{slug(name)}}`);
    title.textContent = name;
    heatmap(svg, ex, "methods", name, layer, "all", scope, 9);
  }}
  overview(ex, $("overview-map").value, layer, head, scope);
  const query = new URLSearchParams({{example: ex.idx, layer, head, scale: scope}});
  history.replaceState(null, "", "?" + query.toString());
}}

// the example's layers, heads and maps in the selects; its own first view unless `query` sets it
function choose(ex, query) {{
  const L = ex.maps.attention.scale.length, H = ex.maps.attention.heads;
  const layers = [...Array(L).keys()], heads = [...Array(H).keys()];
  options($("layer"), layers, layers.map(String), query.get("layer") ?? ex.start[0]);
  options($("head"), [...heads, "all"], [...heads.map(String), "all heads"],
    query.get("head") ?? ex.start[1]);
  const names = Object.keys(ex.maps);
  options($("overview-map"), names, names,
    $("overview-map").value || (names.includes("attribution") ? "attribution" : names[0]));
}}

function start() {{
  if (!DATA.examples.length) {{ $("info").textContent = "no example was sampled"; return; }}
  const query = new URLSearchParams(location.search);
  options($("example"), DATA.examples.map((e) => e.idx),
    DATA.examples.map((e) => `${{e.idx}} (` + (e.gold === null ? "" : `gold ${{e.gold}}, `) +
      `predicted ${{e.pred}})`), query.get("example"));
  $("scale").value = query.get("scale") === "all" ? "all" : "layer";
  choose(DATA.examples.find((e) => String(e.idx) === $("example").value), query);
  $("example").addEventListener("change", () => {{
    choose(DATA.examples.find((e) => String(e.idx) === $("example").value),
      new URLSearchParams());
    draw();
  }});
  for (const id of ["layer", "head", "scale", "overview-map"]) {{
    $(id).addEventListener("change", draw);
  }}
  draw();
}}
start();
</script>
</body></html>
"""


def explorer_page(title: str, examples: list[dict[str, Any]]) -> str:
    """The self-contained explorer of `examples` (`example_data`)."""
    data = json.dumps({"examples": examples}, separators=(",", ":"))
    # inside <script>, "</" would end the element early: JSON allows "<\\/" instead
    return _PAGE.format(title=html.escape(title), data=data.replace("</", "<\\/"))
