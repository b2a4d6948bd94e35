"""The token-interaction methods on hand-built cases whose answer is known, their one interface
(attnlab.methods.method, registry), their evaluation (attnlab.analyses.interaction_eval) and
the stage that runs them all (attnlab.stages.interaction_methods)."""

from __future__ import annotations

from collections import defaultdict
from importlib import import_module
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import test_dumps
import torch
from conftest import DEFAULT_CONFIG
from test_dumps import MODEL_CFG, run_shard
from tiny_models import tiny_batch, tiny_classifier

from attnlab.analyses.interaction_eval import (
    ALL,
    ANY,
    claims,
    deletion_drops,
    deletion_summary,
    edge_order,
    ground_truth,
    ground_truth_summary,
    planted_rank,
)
from attnlab.analyses.interaction_methods import score_example
from attnlab.engine import models
from attnlab.engine.capture import capture, target_probability
from attnlab.engine.intervention import Intervention
from attnlab.methods import attention_graph, registry, sublayer_parts
from attnlab.methods.alti import alti_layer
from attnlab.methods.attattr import attattr_from_dump
from attnlab.methods.attention_norm import attention_norm
from attnlab.methods.attention_x_gradient import attention_x_gradient
from attnlab.methods.edge_masking import masked_f
from attnlab.methods.flow import flow
from attnlab.methods.method import GRADIENTS, DumpRow
from attnlab.methods.occlusion import occlusion
from attnlab.methods.rollout import rollout
from attnlab.methods.value_zeroing import normalise_rows, value_zeroing
from attnlab.model_job import ModelJob
from attnlab.stages import interaction_methods

# the fixture: a random tiny BERT with its tokenizer, and a small synthetic dev split
tiny_shard = test_dumps.tiny_shard
TABLE_ORDER = ["attention", "attattr", "attention_x_gradient", "rollout", "flow",
               "attention_norm", "alti", "value_zeroing", "occlusion"]


def random_attention(layers: int, n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(n), size=(layers, n))


@pytest.fixture(scope="module")
def bert_example():
    model = models.prepare_model(tiny_classifier("bert"))
    batch = tiny_batch("bert", lengths=(7,))
    return model, capture(model, batch, target=1)


def test_rollout_of_identity_attention_is_the_identity():
    identity = np.stack([np.eye(5)] * 3)
    assert np.allclose(rollout(identity), identity)


def test_rollout_is_the_product_of_the_residual_attentions_and_stays_stochastic():
    attention = random_attention(3, 4)
    mixed = attention_graph.residual_attention(attention)
    rolled = rollout(attention)
    assert np.allclose(rolled[2], mixed[2] @ mixed[1] @ mixed[0])
    assert np.allclose(rolled.sum(axis=-1), 1)


def test_flow_of_one_layer_is_its_edge_and_of_two_layers_the_sum_of_narrowest_edges():
    attention = random_attention(2, 4, seed=1)
    mixed = attention_graph.residual_attention(attention)
    flows = flow(attention)
    assert np.allclose(flows[0], mixed[0])
    # two layers: the paths j -> k -> i are edge-disjoint, each carries its narrower edge
    expected = np.minimum(mixed[0][None, :, :], mixed[1][:, :, None]).sum(axis=1)
    assert np.allclose(flows[1], expected)


def test_flow_never_exceeds_the_smallest_cut_and_matches_a_fresh_networkx_max_flow():
    attention = random_attention(3, 4, seed=2)
    mixed = attention_graph.residual_attention(attention)
    flows = flow(attention)
    n = 4
    for layer in range(3):
        # cutting every edge out of the source, or into the sink, is a cut
        out_of_source = mixed[0].sum(axis=0)[None, :]  # by source j
        into_sink = mixed[layer].sum(axis=1)[:, None]  # by sink i
        assert (flows[layer] <= np.minimum(out_of_source, into_sink) + 1e-9).all()
    graph = nx.DiGraph()
    for m in range(3):
        for i in range(n):
            for j in range(n):
                graph.add_edge((m, j), (m + 1, i), capacity=mixed[m, i, j])
    for i, j in [(0, 0), (1, 3), (3, 2)]:  # the residual network reused gives the same flows
        assert flows[2, i, j] == pytest.approx(nx.maximum_flow_value(graph, (0, j), (3, i)))


def test_attention_norm_equals_attention_when_every_transformed_value_has_one_norm():
    probs = torch.tensor(random_attention(1, 5, seed=3))  # one head
    transformed = torch.randn(1, 5, 8, dtype=torch.float64)
    transformed = 2.0 * transformed / transformed.norm(dim=-1, keepdim=True)
    assert torch.allclose(attention_norm(probs, transformed), 2.0 * probs[0])


def test_alti_parts_rebuild_the_attention_sublayer_output(bert_example):
    model, example = bert_example
    layer = 1
    out_proj, layer_norm = models.attention_sublayer(model, layer)
    hidden = example.states[layer][0]
    transformed = sublayer_parts.transformed_values(example.values[layer], out_proj)
    parts = sublayer_parts.head_parts(example.probs[layer], transformed)
    with torch.no_grad():
        z = parts.sum(dim=1) + out_proj.bias + hidden
        expected = models.layer_stack(model)[layer].attention(hidden[None])[0][0]
        assert torch.allclose(layer_norm(z), expected, atol=1e-5)
        contributions = alti_layer(example.probs[layer], transformed, hidden, out_proj,
                                   layer_norm)
    assert torch.allclose(contributions.sum(dim=-1), torch.ones(7), atol=1e-6)
    assert (contributions >= 0).all()


def test_value_zeroing_of_a_layer_whose_values_are_zero_changes_nothing():
    model = models.prepare_model(tiny_classifier("bert"))
    value = models.layer_stack(model)[1].attention.self.value
    with torch.no_grad():
        value.weight.zero_()
        value.bias.zero_()
        example = capture(model, tiny_batch("bert", lengths=(6,)), target=0)
        scores = value_zeroing(model, example.states)
    assert torch.allclose(scores[1], torch.zeros(6, 6), atol=1e-6)  # cos(x, x) rounds to 1
    assert (scores[0] > 0).any()  # the other layers' values do matter
    assert torch.allclose(normalise_rows(scores)[0].sum(dim=-1), torch.ones(6, dtype=scores.dtype))


def test_occlusion_is_the_drop_of_f_with_one_edge_replaced_in_every_head(bert_example):
    model, example = bert_example
    scores = occlusion(model, example, batch_size=16)  # several passes per layer
    assert torch.equal(scores.diagonal(dim1=1, dim2=2), torch.zeros(3, 7))
    for layer, i, j in [(0, 1, 2), (2, 6, 0)]:
        probs = example.probs[layer].clone()
        probs[:, i, j] = 0
        with torch.no_grad():
            replaced = Intervention(replace={layer: probs[None]})
            logits = models.logits(model, example.inputs, replaced)
        expected = example.f_full - float(target_probability(logits, example.target)[0])
        assert float(scores[layer, i, j]) == pytest.approx(expected, abs=1e-6)


def test_attention_x_gradient_sums_to_the_slope_of_f_along_the_scaled_path(bert_example):
    model, example = bert_example
    scores = attention_x_gradient(model, example)
    eps = 1e-3
    for layer in range(3):
        with torch.no_grad():
            f = [float(target_probability(models.logits(model, example.inputs, Intervention(
                scale_layer=layer, scale=torch.tensor([alpha]))), example.target)[0])
                 for alpha in (1 - eps, 1 + eps)]
        assert float(scores[layer].sum()) == pytest.approx((f[1] - f[0]) / (2 * eps), abs=1e-4)


def test_attattr_from_a_dump_row_keeps_the_stored_edges_and_ranks_the_rest_below():
    row = pd.Series({"n_tokens": 3, "attr_full": None, "edge_layer": [0, 0, 1],
                     "edge_i": [0, 2, 1], "edge_j": [1, 0, 2], "edge_score": [0.5, 0.2, 0.9]})
    scores = attattr_from_dump(row, n_layers=2, n_heads=2)
    assert scores[0, 0, 1] == 0.5 and scores[0, 2, 0] == 0.2 and scores[1, 1, 2] == 0.9
    assert np.isneginf(scores[0, 1, 0]) and np.isneginf(scores[1, 0, 0])
    # four unstored edges of layer 0 tie below the two stored ones: ranks 3..6, middle 4.5
    assert planted_rank(scores[0], 1, 2) == 4.5 and planted_rank(scores[0], 1, 0) == 1
    full = np.arange(2 * 2 * 3 * 3, dtype=float)
    summed = attattr_from_dump(pd.Series({**row, "attr_full": full}), n_layers=2, n_heads=2)
    assert np.allclose(summed, full.reshape(2, 2, 3, 3).sum(axis=1))


def test_edge_order_breaks_ties_by_the_given_permutation():
    scores = np.array([[9.0, 1.0, 1.0], [2.0, 9.0, 0.0], [0.0, 3.0, 9.0]])
    # off-diagonal edges in row-major order: (0,1) (0,2) (1,0) (1,2) (2,0) (2,1)
    order = edge_order(scores, ties=np.array([5, 4, 3, 2, 1, 0]))
    assert list(order) == [7, 3, 2, 1, 6, 5]  # 3, 2, then the 1s and 0s in tie order


def test_ground_truth_hits_ranks_and_their_summary():
    scores = {"good": np.array([[[0, 5, 0], [1, 0, 0], [0, 0, 0]]], dtype=float),
              "bad": np.array([[[0, 1, 0], [0, 0, 0], [5, 0, 0]]], dtype=float)}
    rows = pd.DataFrame([{"idx": 0, **r}
                         for r in ground_truth(scores, 1, 0, np.arange(6)[None])])
    summary = ground_truth_summary(rows).set_index(["method", "scope"])
    assert summary.loc[("good", ANY), "hit_share"] == 1 and summary.loc[("good", "0"), "mrr"] == 1
    assert summary.loc[("bad", ANY), "hit_share"] == 0
    assert summary.loc[("bad", ANY), "median_rank"] == 2


def test_deletion_drop_of_the_top_edge_is_its_occlusion_score(bert_example):
    model, example = bert_example
    scores = occlusion(model, example, batch_size=512).numpy()
    n = 7
    ties = np.stack([np.random.default_rng(layer).permutation(n * (n - 1)) for layer in range(3)])
    orders = {"occlusion": np.stack([edge_order(m, t) for m, t in zip(scores, ties, strict=True)])}
    curves = deletion_drops(model, example, orders, steps=4, batch_size=512)
    first = curves[(curves["k"] == 1) & (curves["scope"] == "2")]["drop"].item()
    assert first == pytest.approx(scores[2].max(), abs=1e-6)
    assert set(curves["scope"]) == {"0", "1", "2", ALL} and curves["k"].max() == 4
    # deleting every edge of every layer at once is one masked pass
    every = {layer: torch.eye(n)[None] for layer in range(3)}  # only the diagonal kept
    everything = example.f_full - float(masked_f(model, example, every, batch_size=1)[0])
    all_curve = deletion_drops(model, example, orders, steps=n * n, batch_size=512)
    last = all_curve[all_curve["scope"] == ALL]["drop"].iloc[-1]
    assert last == pytest.approx(everything, abs=1e-6)


def test_aopc_against_random_edges_on_the_same_examples_and_the_claims():
    curves = pd.DataFrame([
        # method, scope, idx, k, drop: AOPC = (sum of drops) / (K + 1) with K = 2
        *[("attattr", ALL, 0, k, d) for k, d in ((1, 0.3), (2, 0.6))],
        *[("attention", ALL, 0, k, d) for k, d in ((1, 0.0), (2, 0.3))],
        *[("random", ALL, 0, k, d) for k, d in ((1, 0.0), (2, 0.0))],
        *[("random", ALL, 1, k, d) for k, d in ((1, 0.6), (2, 0.6))],
    ], columns=["method", "scope", "idx", "k", "drop"])
    summary = deletion_summary(curves).set_index("method")
    assert summary.loc["attattr", "aopc"] == pytest.approx(0.3)
    assert summary.loc["attattr", "aopc_random"] == pytest.approx(0.0)  # idx 0 only
    assert summary.loc["random", "aopc"] == pytest.approx(0.2)
    truth = pd.DataFrame({"method": ["attattr", "attention"], "scope": [ANY, ANY],
                          "hit_share": [0.9, 0.6], "mrr": [0.5, 0.5]})
    verdicts = {c["claim"]: c["verdict"] for c in claims(truth, summary.reset_index())}
    assert verdicts["AttAttr recovers the planted pair more often than attention"] == "holds"
    assert verdicts["AttAttr ranks the planted edge higher than attention"] == "does not hold"
    assert verdicts["AttAttr's deletion curve falls faster than attention's"] == "holds"
    no_truth = claims(truth.iloc[:0], summary.reset_index())
    assert no_truth[0]["verdict"] == "not testable"


def test_the_registry_holds_every_method_module_once_in_the_order_of_the_tables():
    assert [method.name for method in registry.METHODS] == TABLE_ORDER
    modules = [import_module(f"attnlab.methods.{path.stem}")
               for path in Path(registry.__file__).parent.glob("*.py")]
    exposing = {module.__name__.rsplit(".", 1)[1]: module.METHOD
                for module in modules if hasattr(module, "METHOD")}
    # one module per method, named for it, each in the registry
    assert exposing == {method.name: method for method in registry.METHODS}
    known = {"attention", "captured", "model", "dump", "batch_size", GRADIENTS}
    assert all(method.needs <= known for method in registry.METHODS)


def test_every_method_scores_an_example_from_what_it_needs_as_its_own_function_does(
        bert_example):
    model, example = bert_example
    full = np.arange(3 * 4 * 7 * 7, dtype=float)
    dump = DumpRow(pd.Series({"n_tokens": 7, "attr_full": full}), n_layers=3, n_heads=4)
    seconds = defaultdict(float)
    scores = score_example(model, example, dump, methods=registry.METHODS, batch_size=64,
                           seconds=seconds)
    assert list(scores) == TABLE_ORDER
    for matrices in scores.values():
        assert matrices.shape == (3, 7, 7) and matrices.dtype == np.float64
    attention = attention_graph.head_mean(example.probs.double().numpy())
    assert np.array_equal(scores["attention"], attention)
    assert np.array_equal(scores["attattr"], attattr_from_dump(dump.row, 3, 4))
    assert np.array_equal(scores["rollout"], rollout(attention))
    assert np.array_equal(scores["flow"], flow(attention))
    assert np.array_equal(scores["attention_x_gradient"],
                          attention_x_gradient(model, example).double().numpy())
    with torch.no_grad():
        zeroed = normalise_rows(value_zeroing(model, example.states))
    assert np.array_equal(scores["value_zeroing"], zeroed.double().numpy())
    assert np.array_equal(scores["occlusion"], occlusion(model, example, 64).double().numpy())
    assert np.allclose(scores["alti"].sum(axis=-1), 1) and (scores["attention_norm"] >= 0).all()
    # what is read, not computed, here takes no time; the gradient method runs last
    assert list(seconds) == ["rollout", "flow", "attention_norm", "alti", "value_zeroing",
                             "occlusion", "attention_x_gradient"]


def test_the_stage_scores_every_method_and_writes_tables_page_and_figures(tiny_shard, tmp_path):
    task, model_dir, dev = tiny_shard
    run_shard(tiny_shard, tmp_path / "dump.parquet")
    config = {**DEFAULT_CONFIG, "device": "cpu", "tasks": {"syn_mnli": task}, "model": MODEL_CFG,
              "interaction_methods": {"examples": 2, "flow_examples": 1, "deletion_steps": 3,
                                      "batch_size": 64}}
    out = {name: tmp_path / f"{name}.parquet"
           for name in ("scores", "ground_truth", "deletion", "claims")}
    out |= {"leaderboard": tmp_path / "leaderboard.html",
            "ground_truth_figure": tmp_path / "ground_truth.png",
            "deletion_figure": tmp_path / "deletion.png"}
    interaction_methods.run(ModelJob.from_config(
        "interaction_methods", config, task="syn_mnli", outputs=out,
        inputs={"model": model_dir, "dev": dev, "parts": [tmp_path / "dump.parquet"]}))
    scores = pd.read_parquet(out["scores"])
    assert list(scores["method"].unique()) == TABLE_ORDER
    assert "task" not in scores  # its folder, a partition of interaction_scores, names it
    assert (scores["scores"].map(len) == scores["n_tokens"] ** 2).all()
    examples = scores.groupby("method", sort=False)["idx"].unique()
    assert len(examples["attention"]) == 2 and list(examples["flow"]) == [examples["attention"][0]]
    truth, deletion, verdicts = (pd.read_parquet(out[name])
                                 for name in ("ground_truth", "deletion", "claims"))
    assert (truth["task"] == "syn_mnli").all() and set(truth["method"]) == set(TABLE_ORDER)
    assert set(deletion["method"]) == {*TABLE_ORDER, "random"} and len(verdicts) == 4
    page = out["leaderboard"].read_text()
    assert all(f"<td>{name}</td>" in page for name in TABLE_ORDER)
    assert out["ground_truth_figure"].stat().st_size and out["deletion_figure"].stat().st_size
