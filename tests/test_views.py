"""Per-example views: the attribution flowing through each token, the heatmap layer, and a
self-contained HTML page."""

from __future__ import annotations

import copy
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from conftest import DEFAULT_CONFIG

from attnlab.analyses import views
from attnlab.data.dumps import write_dump
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
    # colour strength is |flow| over the example's largest |flow| (4); negative is red
    assert 'background:rgba(0, 150, 60, 0.500)" title="layer 0, position 1: 2"' in html
    assert 'background:rgba(200, 30, 30, 0.250)" title="layer 0, position 2: -1"' in html
    assert html.count("class=planted") == 2 * 2  # two planted tokens in two layers
    assert html.count('src="data:image/png;base64,') == 1
    assert not re.search(r'(src|href)="(?!data:)', html)  # nothing loaded from elsewhere


def test_no_sampled_example_gives_an_empty_page_without_loading_the_model(tmp_path, pair_task):
    pair_task["synthetic"].update(n_train=20, n_dev=4)
    prepare_task("syn_mnli", pair_task, 0, tmp_path / "train.parquet", tmp_path / "dev.parquet")
    write_dump([{"idx": int(i)} for i in pd.read_parquet(tmp_path / "dev.parquet")["idx"]],
               tmp_path / "part.parquet", {"n_layers": 2, "n_heads": 4, "shard": 0, "n_shards": 1})
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["tasks"] = {"syn_mnli": pair_task}
    config["trees"].update(examples=0, example_idx=[])
    out = tmp_path / "views"
    # no model folder: a job that loaded the model would fail
    example_views.run(ModelJob.from_config(
        "example_views", config, task="syn_mnli",
        inputs={"parts": [str(tmp_path / "part.parquet")], "model": str(tmp_path / "model"),
                "dev": str(tmp_path / "dev.parquet"), "tree_figures": str(tmp_path / "trees")},
        outputs={"views": str(out)}))
    assert [p.name for p in out.iterdir()] == ["index.html"]
    page = (out / "index.html").read_text()
    assert "<h1>attribution flow through the tokens: task syn_mnli</h1>" in page
    assert "<section>" not in page
