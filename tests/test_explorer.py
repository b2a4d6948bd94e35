"""The explorer of rule example_views and `attnlab explain`: a self-contained page whose data are
the examples' own matrices in float16 and their trees; and, in a real browser (Debian's chromium,
headless), what it draws for the example, layer and head the URL picks, its colour bars, its
first view, and what a click on the overview and on the scale choice changes."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from attnlab.analyses.trees import tree_from_matrix
from attnlab.report.explorer import example_data, explorer_page

TOKENS = ["[CLS]", "a1", "w3", "b1", "w7", "[SEP]"]
# float16 keeps 11 significant bits: a stored value is within 2^-11 of itself, relatively, and
# within half the smallest subnormal step (2^-25) of the layer's largest |value| in absolute
HALF = {"rtol": 2.0**-11}


def examples() -> tuple[list[dict], dict[int, dict[str, np.ndarray]]]:
    """Two examples (idx 3 and 7) of a model with 3 layers and 2 heads over 6 tokens, the
    planted pair at positions 1 and 3 (layer 0 a millionth of the others, as a real model's
    lower layers can be); example 7 has an effective attention map and two methods' maps. With
    their matrices by idx."""
    rng = np.random.default_rng(0)
    data, matrices = [], {}
    for idx in (3, 7):
        maps = {"attention": rng.dirichlet(np.ones(6), size=(3, 2, 6)),
                "attribution": rng.normal(size=(3, 2, 6, 6)) + 0.5}
        maps["attribution"][0] *= 1e-6
        methods = {}
        if idx == 7:
            maps["effective attention"] = maps["attention"] - 0.1 * rng.random((3, 2, 6, 6))
            methods = {"rollout": rng.random((3, 6, 6)), "occlusion": rng.normal(size=(3, 6, 6))}
        row = pd.Series({"idx": idx, "tokens": TOKENS, "label": 0, "pred": 1, "planted_i": 1,
                         "planted_j": 3})
        tree = tree_from_matrix(maps["attribution"].sum(axis=1), 0.2, "layer")
        data.append(example_data(row, maps, tree, ["negative", "positive"], methods))
        matrices[idx] = {**maps, **methods}
    return data, matrices


def embedded(page: str) -> dict:
    script = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(script.group(1).replace("<\\/", "</"))


def stored(encoded: dict) -> np.ndarray:
    """A map as the page stores it, multiplied back by its layers' scales."""
    halves = np.frombuffer(base64.b64decode(encoded["data"]), dtype="<f2").astype(float)
    scale = np.array(encoded["scale"])
    return halves.reshape(len(scale), -1) * scale[:, None]


def test_the_page_embeds_every_map_in_float16_and_loads_nothing_from_elsewhere():
    data, matrices = examples()
    page = explorer_page("explorer: task <pairs>", data)
    assert "<title>explorer: task &lt;pairs&gt;</title>" in page
    assert not re.search(r'(src|href)="', page)  # no external script, style or link
    shown = embedded(page)
    assert [e["idx"] for e in shown["examples"]] == [3, 7]
    example = shown["examples"][1]
    assert list(example["maps"]) == ["attention", "attribution", "effective attention"]
    assert list(example["methods"]) == ["rollout", "occlusion"]
    for kind in ("maps", "methods"):
        for name, encoded in example[kind].items():
            values = matrices[7][name].reshape(3, -1)
            # each layer to float16 precision of itself: layer 0's attributions, a millionth
            # of the others', keep their digits (float16 alone would make them subnormal)
            np.testing.assert_allclose(stored(encoded), values, **HALF,
                                       atol=np.abs(values).max() * 2.0**-25)
            assert encoded["signed"] == bool((values < 0).any())
    assert example["maps"]["attribution"]["combine"] == "sum"
    assert example["maps"]["attention"]["combine"] == "mean"
    # the first view: the layer and head of the example's largest attribution
    attribution = matrices[7]["attribution"]
    assert example["start"] == list(np.unravel_index(attribution.argmax(), attribution.shape)[:2])
    assert example["planted"] == [1, 3] and example["gold"] == "negative"
    tree = tree_from_matrix(attribution.sum(axis=1), 0.2, "layer")
    assert [e[:3] for e in example["edges"]] == [list(e[:3]) for e in tree.edges]
    assert example["top"] == tree.top


def test_a_closing_script_tag_in_a_token_cannot_end_the_data():
    data, _ = examples()
    data[0]["tokens"][2] = "</script><b>"
    page = explorer_page("t", data)
    assert page.count("</script>") == 2  # the data's and the renderer's own
    assert embedded(page)["examples"][0]["tokens"][2] == "</script><b>"


BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no chromium to draw the page in (Debian: apt-get install chromium)")


def drawn(path, query: str = "", clicks: str = "") -> str:
    """The DOM the page has drawn in headless chromium for the URL query `query`, after the
    script `clicks` (appended to the page, so it runs once the page has drawn) has run."""
    if clicks:
        page = path.read_text()
        path = path.with_name("clicked.html")
        path.write_text(page.replace("</body>", f"<script>{clicks}</script></body>"))
    result = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
         f"file://{path}?{query}"], capture_output=True, text=True, timeout=120, check=True)
    return result.stdout


def svg(dom: str, panel: str) -> str:
    return re.search(rf'<svg id="{panel}".*?</svg>', dom, re.S).group(0)


def cells(panel_svg: str) -> np.ndarray:
    found = re.findall(r'class="cell" data-i="(\d+)" data-j="(\d+)" data-v="([^"]+)"',
                       panel_svg)
    out = np.full((6, 6), np.nan)
    for i, j, v in found:
        out[int(i), int(j)] = float(v)
    return out


def colour_bar(panel_svg: str) -> tuple[float, str, list[str]]:
    """The value a panel's colour bar gives its full colour, its scope and its drawn labels."""
    bar = re.search(r'<g class="colourbar" data-limit="([^"]+)" data-scope="(\w+)">(.*?)</g>',
                    panel_svg, re.S)
    return float(bar.group(1)), bar.group(2), re.findall(r'class="bar-label">([^<]+)<',
                                                         bar.group(3))


@needs_browser
def test_the_browser_draws_the_example_layer_and_head_the_url_picks(tmp_path):
    data, matrices = examples()
    path = tmp_path / "explorer.html"
    path.write_text(explorer_page("t", data))
    dom = drawn(path, "example=7&layer=0&head=1")
    m = matrices[7]
    assert "example 7: gold negative, predicted positive; planted pair a1 – b1" in dom
    assert re.search(r'id="map-attention-title">attention, layer 0, head 1; colour scale: '
                     r"the largest \|value\| of layer 0<", dom)
    # every cell is that example's, layer's and head's value, to float16 precision: layer 0's
    # attributions too, a millionth of the others'
    for name in ("attention", "attribution", "effective attention"):
        panel = svg(dom, "map-" + name.replace(" ", "-"))
        np.testing.assert_allclose(cells(panel), m[name][0, 1], **HALF,
                                   atol=np.abs(m[name][0]).max() * 2.0**-25)
        # the colour bar: the layer's largest |value| (every head), drawn as its label
        limit, scope, labels = colour_bar(panel)
        assert scope == "layer"
        assert limit == pytest.approx(np.abs(m[name][0]).max(), rel=1e-12)
        assert float(labels[-1]) == pytest.approx(limit, rel=5e-3)
        assert labels[0] == ("0" if name == "attention" else "-" + labels[-1])
    # the methods' maps of layer 0, side by side
    assert "The interaction methods' scores of layer 0" in dom
    for name in ("rollout", "occlusion"):
        np.testing.assert_allclose(cells(svg(dom, f"method-{name}")), m[name][0], **HALF,
                                   atol=np.abs(m[name][0]).max() * 2.0**-25)
    # the planted pair: its cells framed (both directions), its tokens marked
    for panel in ("map-attention", "map-attribution"):
        assert svg(dom, panel).count('class="planted"></rect>') == 2
        assert re.findall(r'class="planted"[^>]*>([^<]+)</text>', svg(dom, panel)) == [
            "a1", "a1", "b1", "b1"]
    # the tree: every flow edge, those of layer 0 drawn as the chosen ones
    tree = tree_from_matrix(m["attribution"].sum(axis=1), 0.2, "layer")
    edges = re.findall(r'class="(edge(?: chosen)?)" data-layer="(\d+)"', svg(dom, "tree"))
    assert len(edges) == len(tree.edges) >= 1
    assert all((kind == "edge chosen") == (layer == "0") for kind, layer in edges)
    # the overview: every head of every layer, the chosen one marked
    assert len(re.findall(r"<canvas ", dom)) == 3 * 2
    assert re.search(r'<canvas [^>]*data-layer="0" data-head="1"[^>]*class="chosen"', dom)
    # all heads: attention averaged, attribution summed; example 3 has no other map or method
    dom = drawn(path, "example=3&layer=2&head=all")
    m = matrices[3]
    assert "attention, layer 2, all heads (mean)" in dom
    assert 'id="map-effective-attention"' not in dom and 'id="method-' not in dom
    np.testing.assert_allclose(cells(svg(dom, "map-attention")), m["attention"][2].mean(axis=0),
                               rtol=1e-3)
    summed = m["attribution"][2].sum(axis=0)
    np.testing.assert_allclose(cells(svg(dom, "map-attribution")), summed, rtol=1e-3,
                               atol=np.abs(m["attribution"][2]).max() * 2.0**-11)
    limit, _, _ = colour_bar(svg(dom, "map-attribution"))
    assert limit == pytest.approx(np.abs(summed).max(), rel=2.0**-10)


@needs_browser
def test_the_first_view_is_the_largest_attribution_and_clicks_change_it(tmp_path):
    data, matrices = examples()
    path = tmp_path / "explorer.html"
    path.write_text(explorer_page("t", data))
    m = matrices[3]
    layer, head = np.unravel_index(m["attribution"].argmax(), m["attribution"].shape)[:2]
    dom = drawn(path)
    assert f'id="map-attribution-title">attribution, layer {layer}, head {head};' in dom
    # a click on layer 0, head 1 of the overview opens it; then one scale for all layers
    dom = drawn(path, clicks="""
        document.querySelector('canvas[data-layer="0"][data-head="1"]').click();
        const scale = document.getElementById("scale");
        scale.value = "all"; scale.dispatchEvent(new Event("change"));""")
    assert 'id="map-attribution-title">attribution, layer 0, head 1; colour scale: the ' \
           "largest |value| of all layers<" in dom
    panel = svg(dom, "map-attribution")
    np.testing.assert_allclose(cells(panel), m["attribution"][0, 1], **HALF,
                               atol=np.abs(m["attribution"][0]).max() * 2.0**-25)
    limit, scope, _ = colour_bar(panel)
    assert scope == "all" and limit == pytest.approx(np.abs(m["attribution"]).max(), rel=1e-12)
    assert re.search(r'<canvas [^>]*data-layer="0" data-head="1"[^>]*class="chosen"', dom)


def test_the_default_runs_explorer_stays_small():
    """docs/outputs.md: an example of the default run (4 layers, 8 heads, about 18 words; the
    synthetic tasks' examples have 15 to 18) with attention, effective attention, attribution
    and ten methods' maps adds under 125 kB; its page of 4 such examples stays under 500 kB."""
    rng = np.random.default_rng(0)
    words = 18
    row = pd.Series({"idx": 0, "tokens": [f"mw{k}" for k in range(words)], "label": 0,
                     "pred": 0, "planted_i": 2, "planted_j": 12})
    data = []
    for _ in range(4):
        maps = {name: rng.standard_t(3, size=(4, 8, words, words))
                for name in ("attention", "effective attention", "attribution")}
        methods = {f"method{k}": rng.random((4, words, words)) for k in range(10)}
        tree = tree_from_matrix(maps["attribution"].sum(axis=1), 0.4, "layer")
        data.append(example_data(row, maps, tree, ["a", "b", "c"], methods))
    empty = len(explorer_page("explorer: task syn_mnli", []).encode())
    one = len(explorer_page("explorer: task syn_mnli", data[:1]).encode()) - empty
    size = len(explorer_page("explorer: task syn_mnli", data).encode())
    assert one < 125_000 and size < 500_000, (one, size)
