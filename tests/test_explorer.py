"""The explorer of rule example_views: a self-contained page whose data are the examples' own
matrices and trees, rounded; and, in a real browser (Debian's chromium, headless), what it draws
for the example, layer and head the URL picks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from attnlab.analyses.trees import tree_from_matrix
from attnlab.report.explorer import LEVELS, example_data, explorer_page

TOKENS = ["[CLS]", "a1", "w3", "b1", "w7", "[SEP]"]


def examples() -> tuple[list[dict], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Two examples (idx 3 and 7) of a model with 3 layers and 2 heads over 6 tokens, the
    planted pair at positions 1 and 3 (layer 0 a thousandth of the others); with their matrices
    by idx."""
    rng = np.random.default_rng(0)
    data, matrices = [], {}
    for idx in (3, 7):
        attention = rng.dirichlet(np.ones(6), size=(3, 2, 6))
        attribution = rng.normal(size=(3, 2, 6, 6)) + 0.5
        attribution[0] *= 1e-3  # a lower layer's attributions, far below the last layer's
        row = pd.Series({"idx": idx, "tokens": TOKENS, "label": 0, "pred": 1, "planted_i": 1,
                         "planted_j": 3})
        tree = tree_from_matrix(attribution.sum(axis=1), 0.2, "layer")
        data.append(example_data(row, attention, attribution, tree, ["negative", "positive"]))
        matrices[idx] = attention, attribution
    return data, matrices


def embedded(page: str) -> dict:
    script = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(script.group(1).replace("<\\/", "</"))


def test_the_page_embeds_every_example_rounded_and_loads_nothing_from_elsewhere():
    data, matrices = examples()
    page = explorer_page("explorer: task <pairs>", data)
    assert "<title>explorer: task &lt;pairs&gt;</title>" in page
    assert not re.search(r'(src|href)="', page)  # no external script, style or link
    shown = embedded(page)
    assert [e["idx"] for e in shown["examples"]] == [3, 7]
    example = shown["examples"][1]
    attention, attribution = matrices[7]
    # hundredths of a probability, and of each layer's largest |attribution|: a layer whose
    # attributions are a thousandth of another's keeps them (one scale would round them to 0)
    np.testing.assert_allclose(np.array(example["attention"]) / LEVELS, attention, atol=0.005)
    for layer, scale in enumerate(example["scale"]):
        largest = np.abs(attribution[layer]).max()
        assert scale == pytest.approx(largest, rel=1e-3)
        np.testing.assert_allclose(np.array(example["attribution"][layer]) / LEVELS * scale,
                                   attribution[layer], atol=0.006 * largest)
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


def drawn(path, query: str) -> str:
    """The DOM the page has drawn in headless chromium for the URL query `query`."""
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


@pytest.mark.skipif(BROWSER is None, reason="no chromium to draw the page in (Debian: apt-get "
                    "install chromium)")
def test_the_browser_draws_the_example_layer_and_head_the_url_picks(tmp_path):
    data, matrices = examples()
    path = tmp_path / "explorer.html"
    path.write_text(explorer_page("t", data))
    dom = drawn(path, "example=7&layer=2&head=1")
    attention, attribution = matrices[7]
    assert "example 7: gold negative, predicted positive; planted pair a1 – b1" in dom
    assert 'id="attention-title">attention, layer 2, head 1<' in dom
    assert re.search(r'id="attribution-title">attribution, layer 2, head 1 ', dom)
    # every cell is that example's, layer's and head's value, to the page's rounding
    np.testing.assert_allclose(cells(svg(dom, "attention")), attention[2, 1], atol=0.006)
    scale = np.abs(attribution[2]).max()
    np.testing.assert_allclose(cells(svg(dom, "attribution")), attribution[2, 1],
                               atol=0.006 * scale)
    # the planted pair: its cells framed (both directions) in both heatmaps, its tokens marked
    for panel in ("attention", "attribution"):
        assert svg(dom, panel).count('class="planted"></rect>') == 2
        assert re.findall(r'class="planted"[^>]*>([^<]+)</text>', svg(dom, panel)) == [
            "a1", "a1", "b1", "b1"]
    # the tree: every flow edge, those of layer 2 drawn as the chosen ones
    tree = tree_from_matrix(attribution.sum(axis=1), 0.2, "layer")
    edges = re.findall(r'class="(edge(?: chosen)?)" data-layer="(\d+)"', svg(dom, "tree"))
    assert len(edges) == len(tree.edges) >= 1
    assert all((kind == "edge chosen") == (layer == "2") for kind, layer in edges)
    # all heads: attention averaged, attribution summed
    dom = drawn(path, "example=3&layer=0&head=all")
    attention, attribution = matrices[3]
    assert "attention, layer 0, all heads (mean)" in dom
    np.testing.assert_allclose(cells(svg(dom, "attention")), attention[0].mean(axis=0),
                               atol=0.006)
    np.testing.assert_allclose(cells(svg(dom, "attribution")), attribution[0].sum(axis=0),
                               atol=0.012 * np.abs(attribution).max())
    assert "example 3: gold negative, predicted positive; planted pair a1 – b1" in dom


def test_the_default_runs_explorer_stays_small():
    """docs/outputs.md: an example of the default run (4 layers, 8 heads, about 18 words; the
    synthetic tasks' examples have 15 to 18) adds under 80 kB, its page of 4 examples stays
    under 320 kB. Random matrices are the worst case: every entry has its own digits."""
    rng = np.random.default_rng(0)
    words = 18
    row = pd.Series({"idx": 0, "tokens": [f"mw{k}" for k in range(words)], "label": 0,
                     "pred": 0, "planted_i": 2, "planted_j": 12})
    data = []
    for _ in range(4):
        attention = rng.dirichlet(np.ones(words) * 0.3, size=(4, 8, words))
        attribution = rng.standard_t(3, size=(4, 8, words, words))
        tree = tree_from_matrix(attribution.sum(axis=1), 0.4, "layer")
        data.append(example_data(row, attention, attribution, tree, ["a", "b", "c"]))
    empty = len(explorer_page("explorer: task syn_mnli", []).encode())
    one = len(explorer_page("explorer: task syn_mnli", data[:1]).encode()) - empty
    size = len(explorer_page("explorer: task syn_mnli", data).encode())
    assert one < 80_000 and size < 320_000, (one, size)
