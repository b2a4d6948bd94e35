"""Per-example views: the attribution flowing through each token, the heatmap layer, a
self-contained HTML page, and words a real WordPiece tokenizer splits merged into one."""

from __future__ import annotations

import copy
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from conftest import DEFAULT_CONFIG
from test_trees import PIECES, hand_made_pieces, wordpiece_row

from attnlab.analyses import views
from attnlab.data.dumps import word_row, write_dump
from attnlab.data.tasks import prepare_task
from attnlab.model_job import ModelJob
from attnlab.report.flow_figures import example_section, flow_page
from attnlab.stages import example_views


def test_token_flow_sums_a_tokens_row_and_column_without_itself():
    a = np.arange(9.0).reshape(1, 3, 3)  # [[0 1 2] [3 4 5] [6 7 8]]
    # token 1: row 3 + 5, column 1 + 7; its own 4 left out
    assert views.token_flow(a).tolist() == [[1 + 2 + 3 + 6, 3 + 5 + 1 + 7, 6 + 7 + 2 + 5]]


def test_heatmap_layer_counts_from_either_end_or_takes_the_strongest():
    attr = np.zeros((4, 2, 3, 3))
    attr[2, 1, 0, 2] = 5.0
    assert views.heatmap_layer(None, attr) == 2
    assert views.heatmap_layer(-1, attr) == 3 and views.heatmap_layer(1, attr) == 1
    with pytest.raises(ValueError, match="trees.heatmap_layer: 4 is not a layer of the model "
                                         r"\(0..3, or -4..-1 from the end\)"):
        views.heatmap_layer(4, attr)


def test_html_section_colours_every_token_of_every_layer_and_embeds_its_figures(tmp_path):
    figure = tmp_path / "fig.png"
    plt.figure(figsize=(1, 1))
    plt.savefig(figure)
    plt.close("all")
    row = pd.Series({"idx": 3, "label": 1, "pred": 0, "probs": [0.6, 0.4],
                     "tokens": ["[CLS]", "a<b", "c", "[SEP]"], "planted_i": 1, "planted_j": 2})
    flow = np.array([[0.0, 2.0, -1.0, 0.5], [4.0, 0.0, 0.0, 0.0]])
    html = flow_page("t", [example_section(row, flow, ["neg", "pos"], [figure])])
    assert "a&lt;b" in html and "a<b" not in html  # tokens are escaped
    rows = re.findall(r"<tr><th>layer (\d)</th>(.*?)</tr>", html)
    assert [layer for layer, _ in rows] == ["1", "0"]  # the last layer on top
    assert all(cells.count("<td") == 4 for _, cells in rows)
    # colour strength is |flow| over the example's largest |flow| (4); positive is red, negative
    # blue, as in the attribution heatmaps
    assert 'background:rgba(214, 39, 40, 0.500)" title="layer 0, position 1: 2"' in html
    assert 'background:rgba(31, 119, 180, 0.250)" title="layer 0, position 2: -1"' in html
    assert html.count("class=planted") == 2 * 2  # two planted tokens in two layers
    assert html.count('src="data:image/png;base64,') == 1
    # nothing loaded from elsewhere; the one link is to the explorer beside the page
    assert not re.search(r'(src|href)="(?!data:|explorer.html")', html)


def test_no_sampled_example_gives_an_empty_page_without_loading_the_model(tmp_path, pair_task):
    pair_task["synthetic"].update(n_train=20, n_dev=4)
    prepare_task("syn_mnli", pair_task, 0, tmp_path / "train.parquet", tmp_path / "dev.parquet")
    write_dump([{"idx": int(i)} for i in pd.read_parquet(tmp_path / "dev.parquet")["idx"]],
               tmp_path / "part.parquet", {"n_layers": 2, "n_heads": 4, "shard": 0, "n_shards": 1})
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["tasks"] = {"syn_mnli": pair_task}
    config["trees"].update(examples=0, example_idx=[])
    # the interaction methods scored no example either
    pd.DataFrame({"idx": [], "method": [], "layer": [], "n_tokens": [], "scores": []}).to_parquet(
        tmp_path / "scores.parquet")
    out = tmp_path / "views"
    # no model folder: a job that loaded the model would fail
    example_views.run(ModelJob.from_config(
        "example_views", config, task="syn_mnli",
        inputs={"parts": [str(tmp_path / "part.parquet")], "model": str(tmp_path / "model"),
                "dev": str(tmp_path / "dev.parquet"), "tree_figures": str(tmp_path / "trees"),
                "scores": str(tmp_path / "scores.parquet")},
        outputs={"views": str(out)}))
    assert sorted(p.name for p in out.iterdir()) == ["explorer.html", "index.html"]
    page = (out / "index.html").read_text()
    assert "<h1>attribution flow through the tokens: task syn_mnli</h1>" in page
    assert "<section>" not in page


def test_views_merge_the_pieces_of_a_word(wordpiece_tokenizer):
    """Over MiniLM's pieces: attribution summed over the pieces of both words, attention summed
    over the key word's pieces and averaged over the query word's (rows still sum to 1); the
    flow and the page read whole words."""
    attr = hand_made_pieces()
    row = pd.Series(wordpiece_row(wordpiece_tokenizer, attr))
    rng = np.random.default_rng(0)
    attention = rng.uniform(size=(3, 2, 13, 13))
    attention /= attention.sum(axis=-1, keepdims=True)
    merged = views.word_maps(row, {"attribution": attr.double().numpy(), "attention": attention},
                             summed=["attribution"])
    by_word, attention_by_word = merged["attribution"], merged["attention"]
    assert by_word.shape == attention_by_word.shape == (3, 2, 10, 10)
    # "unsentimental" (word 2, tokens 2..5) reading "film" (word 7, token 10), and itself
    assert by_word[1, :, 2, 7].sum() == 1.0 and by_word[0, 1, 2, 2] == 0.375
    assert attention_by_word[0, 1, 2, 7] == pytest.approx(attention[0, 1, PIECES, 10].mean())
    assert attention_by_word[0, 1, 7, 2] == pytest.approx(attention[0, 1, 10, PIECES].sum())
    np.testing.assert_allclose(attention_by_word.sum(axis=-1), 1.0)
    shown = word_row(row)
    flow = views.token_flow(by_word.sum(axis=1))
    assert flow.shape == (3, 10)
    html = flow_page("t", [example_section(shown, flow, ["negative", "positive"], [])],
                     merged_words=True)
    cells = re.findall(r"<td [^>]*>([^<]*)</td>", html)
    assert cells[:10] == ["[CLS]", "an", "unsentimental", ",", "well", "-", "crafted", "film",
                          ".", "[SEP]"]
    assert "##" not in "".join(cells) and "shown whole" in html


def test_views_of_words_that_are_tokens_are_as_they_were():
    """A row without word columns (a word-level tokenizer's): the matrices and the page are
    those of the tokens, unchanged."""
    attr, attention = np.arange(16.0).reshape(1, 1, 4, 4), np.full((1, 1, 4, 4), 0.25)
    row = pd.Series({"word_ids": None, "tokens": ["[CLS]", "a", "b", "[SEP]"]})
    same = views.word_maps(row, {"attribution": attr, "attention": attention},
                           summed=["attribution"])
    assert same["attribution"] is attr and same["attention"] is attention
    assert flow_page("t", []) == flow_page("t", [], merged_words=False)
    assert "shown whole" not in flow_page("t", [])
