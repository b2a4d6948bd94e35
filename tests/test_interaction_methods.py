"""The token-interaction methods on hand-built cases whose answer is known, their one interface
(attnlab.methods.method, registry), their evaluation (attnlab.analyses.interaction_eval) and
the stage that runs them all (attnlab.stages.interaction_methods)."""

from __future__ import annotations

import copy
import sys
from collections import defaultdict
from importlib import import_module
from itertools import islice
from pathlib import Path
from types import ModuleType

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import test_dumps
import torch
from conftest import DEFAULT_CONFIG, learned_metrics
from test_dumps import MODEL_CFG, run_shard
from tiny_models import tiny_batch, tiny_causal_lm, tiny_classifier, tiny_prompts

from attnlab.analyses.interaction_eval import (
    ALL,
    ANY,
    claims,
    deletion_drops,
    deletion_summary,
    edge_order,
    erasure,
    ground_truth,
    ground_truth_summary,
    intervals,
    pairs,
    planted_rank,
)
from attnlab.analyses.interaction_methods import Options, compare_methods, score_example
from attnlab.engine import models
from attnlab.engine.attribution import attribute
from attnlab.engine.capture import capture, target_probability
from attnlab.engine.intervention import Intervention
from attnlab.methods import attention_graph, registry, sublayer_parts
from attnlab.methods.alti import alti_layer
from attnlab.methods.attattr import attattr
from attnlab.methods.attention_norm import attention_norm
from attnlab.methods.attention_x_gradient import attention_x_gradient
from attnlab.methods.edge_masking import masked_probabilities, off_diagonal
from attnlab.methods.flow import flow
from attnlab.methods.method import GRADIENTS, Method, Variants
from attnlab.methods.occlusion import occlusion
from attnlab.methods.rollout import rollout
from attnlab.methods.value_zeroing import normalise_rows, value_zeroing
from attnlab.model_job import ModelJob
from attnlab.plumbing import code_version
from attnlab.plumbing.config import load_schema, validate_config
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.families import CLASSIFIER, names
from attnlab.stages import interaction_methods

# the fixture: a random tiny BERT with its tokenizer, and a small synthetic dev split
tiny_shard = test_dumps.tiny_shard
# every method, in the order of the registry, which is the tables' order
TABLE_ORDER = [method.name for method in registry.METHODS]


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
    flows = flow(attention, normalised=False)
    assert np.allclose(flows[0], mixed[0])
    # two layers: the paths j -> k -> i are edge-disjoint, each carries its narrower edge
    expected = np.minimum(mixed[0][None, :, :], mixed[1][:, :, None]).sum(axis=1)
    assert np.allclose(flows[1], expected)


def test_flow_never_exceeds_the_smallest_cut_and_is_networkx_float_max_flow_within_its_bound():
    attention = random_attention(3, 6, seed=2)
    mixed = attention_graph.residual_attention(attention)
    flows = flow(attention, normalised=False)
    n = 6
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
    exact = np.array([[nx.maximum_flow_value(graph, (0, j), (3, i)) for j in range(n)]
                      for i in range(n)])
    # SciPy's integer capacities, rounded to 2^-30: a cut of k edges moves by at most k·2^-31,
    # and no cut has more than the graph's 3·n² edges (attnlab.methods.flow)
    error = np.abs(flows[2] - exact).max()
    assert error <= 3 * n * n * 2.0**-31


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
    transformed = sublayer_parts.transformed_values(example.values[layer], out_proj.weight)
    parts = sublayer_parts.head_parts(example.probs[layer], transformed)
    with torch.no_grad():
        z = parts.sum(dim=1) + out_proj.bias + hidden
        expected = models.layer_stack(model)[layer].attention(hidden[None])[0][0]
        assert torch.allclose(layer_norm(z), expected, atol=1e-5)
        contributions = alti_layer(next(islice(sublayer_parts.sublayers(model, example),
                                               layer, None)))
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


def _drop_without_edge(model, example, layer: int, i: int, j: int) -> float:
    """F(A) minus F with edge (i, j) of `layer` zeroed in every head, by one forward pass."""
    probs = example.probs[layer].clone()
    probs[:, i, j] = 0
    with torch.no_grad():
        logits = models.logits(model, example.inputs, Intervention(replace={layer: probs[None]}))
    return example.f_full - float(target_probability(logits, example.target)[0])


def test_occlusion_is_the_drop_of_f_with_one_edge_replaced_in_every_head(bert_example):
    model, example = bert_example
    scores = occlusion(model, example, batch_size=16)  # several passes per layer
    assert torch.equal(scores.diagonal(dim1=1, dim2=2), torch.zeros(3, 7))
    for layer, i, j in [(0, 1, 2), (2, 6, 0)]:
        expected = _drop_without_edge(model, example, layer, i, j)
        assert float(scores[layer, i, j]) == pytest.approx(expected, abs=1e-6)


def _every_row_occlusion(model, example, batch_size: int) -> torch.Tensor:
    """O^l_ij with every copy run through every row from layer l up (as occlusion ran before
    it ran only the rows that change)."""
    n, layers = example.n_tokens, example.probs.shape[0]
    edges = off_diagonal(n, models.family_of(model).causal)
    keep = torch.ones(len(edges), n * n)
    keep[torch.arange(len(edges)), edges] = 0
    scores = torch.zeros(layers, n * n)
    for layer in range(layers):
        masked = masked_probabilities(model, example, {layer: keep.view(-1, n, n)}, batch_size)
        scores[layer, edges] = example.f_full - masked[:, example.target]
    return scores.view(-1, n, n)


# BART's classifier runs every copy whole, as the reference does
@pytest.mark.parametrize("family", [name for name in names() if name != "bart"])
def test_occlusion_of_the_rows_that_change_is_that_of_every_row(family):
    if family in names(CLASSIFIER):
        model = models.prepare_model(tiny_classifier(family))
        example = capture(model, tiny_batch(family, lengths=(7,)), target=1)
    else:  # 6 tokens: past the sliding window (3) of Qwen2's layer 1 and Mistral's
        model = models.prepare_model(tiny_causal_lm(family))
        prompt = tiny_prompts(lengths=(6,))
        example = capture(model, {"input_ids": prompt["input_ids"],
                                  "attention_mask": prompt["attention_mask"]},
                          target=int(prompt["labels"][0]))
    scores = occlusion(model, example, batch_size=8)  # several passes per layer
    reference = _every_row_occlusion(model, example, batch_size=8)
    # F is float32 (target_probability) and the rows' products are summed in another order
    # (one query row against n of them), carried through the layers: 1e-6 (measured 6e-8)
    assert torch.allclose(scores, reference, rtol=0, atol=1e-6)
    assert reference.abs().max() > 1e-4  # the edges matter, far beyond that tolerance
    # of the last layer only the classified row is read: its other edges change nothing
    read = models.classified_position(model, example.n_tokens)
    assert (scores[-1, torch.arange(example.n_tokens) != read] == 0).all()


def f_scaled(model, example, layer: int, alpha: float) -> float:
    """F(α A^l): the target's probability with layer `layer`'s attention scaled by α."""
    with torch.no_grad():
        logits = models.logits(model, example.inputs,
                               Intervention(scale_layer=layer, scale=torch.tensor([alpha])))
    return float(target_probability(logits, example.target)[0])


def slope_at_one(model, example, layer: int, eps: float = 1e-3) -> float:
    """dF(α A^l)/dα at α = 1, by a central difference (error O(eps²), far below 1e-4 here)."""
    return (f_scaled(model, example, layer, 1 + eps)
            - f_scaled(model, example, layer, 1 - eps)) / (2 * eps)


def test_attention_x_gradient_sums_to_the_slope_of_f_along_the_scaled_path(bert_example):
    model, example = bert_example
    scores = attention_x_gradient(model, example)
    for layer in range(3):
        assert float(scores[layer].sum()) == pytest.approx(slope_at_one(model, example, layer),
                                                           abs=1e-4)


ENGINE = {"quadrature": "adaptive", "steps": 6, "batch_size": 32, "tolerance": 1e-4,
          "max_steps": 120, "scan_steps": 8}


def test_attattr_is_the_engines_attribution_summed_over_heads_and_complete(bert_example):
    model, example = bert_example
    scores = attattr(model, example, ENGINE)
    whole = attribute(model, example.inputs, torch.tensor([example.target]), **ENGINE)
    assert torch.allclose(scores, whole.attr[0].sum(dim=1))
    # completeness: each layer's scores sum to F(A) − F(0·A^l), within the engine's tolerance
    delta = example.f_full - whole.f_zero[0].double()
    assert torch.allclose(scores.double().sum(dim=(1, 2)), delta, atol=1e-4)


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


def test_a_decoder_s_planted_edge_is_ranked_among_its_edges_only():
    # causal scores: only i > j is an edge; the masked entries above the diagonal are 0
    scores = np.array([[0, 0, 0], [-1, 0, 0], [-2, -3, 0]], dtype=float)
    # (1, 0) is the best of the three edges, whichever way the pair is given; before, the
    # masked entry (0, 1) was ranked too, above every edge, at a rank below 1
    assert planted_rank(scores, 0, 1, causal=True) == planted_rank(scores, 1, 0, causal=True) == 1
    assert planted_rank(scores, 2, 1, causal=True) == 3
    # ties at their mean rank: the three edges all 0
    assert planted_rank(np.zeros((3, 3)), 1, 0, causal=True) == 2
    # an encoder ranks both directions: (0, 1) = 0 is the best of its six edges
    assert planted_rank(scores, 1, 0) == 1 + 0 + (3 - 1) / 2  # three edges at 0, itself one


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
    deleted = masked_probabilities(model, example, every, batch_size=1)[0]
    all_curve = deletion_drops(model, example, orders, steps=n * n, batch_size=512)
    last = all_curve[all_curve["scope"] == ALL].iloc[-1]
    assert last["drop"] == pytest.approx(example.f_full - float(deleted[example.target]), abs=1e-6)
    tv = 0.5 * float((deleted - example.distribution).abs().sum())
    assert last["tv"] == pytest.approx(tv, abs=1e-6)
    # the class probabilities sum to 1 on both sides, so the total variation bounds |drop|
    assert (curves["tv"] >= curves["drop"].abs() - 1e-7).all()


def test_erasure_removes_or_keeps_the_top_ordinary_tokens(bert_example):
    model, example = bert_example
    ordinary = np.array([False, True, True, True, True, True, False])  # [CLS] ... [SEP]
    importance = {"first": np.array([9.0, 5, 4, 3, 2, 1, 9]), "last": np.arange(7.0)}
    table = erasure(model, example, importance, ordinary=ordinary, bins=[0.2, 0.5],
                    pad_id=0).set_index(["method", "bin"])

    def f(keep):
        inputs = {k: v[:, torch.as_tensor(keep)] for k, v in example.inputs.items()}
        with torch.no_grad():
            return float(torch.softmax(models.logits(model, inputs), -1)[0, example.target])

    # bin 0.5 of 5 ordinary tokens: the top 3 (never the special tokens, whatever they score)
    keep = np.array([True, False, False, False, True, True, True])
    assert table.loc[("first", 0.5), "comprehensiveness"] == pytest.approx(
        example.f_full - f(keep), abs=1e-6)
    assert table.loc[("first", 0.5), "sufficiency"] == pytest.approx(
        example.f_full - f(~keep | ~ordinary), abs=1e-6)
    keep = np.array([True, True, True, True, True, False, True])  # bin 0.2: one token
    assert table.loc[("last", 0.2), "comprehensiveness"] == pytest.approx(
        example.f_full - f(keep), abs=1e-6)


def test_aopc_against_random_edges_on_the_same_examples():
    curves = pd.DataFrame([
        # method, scope, idx, k, drop, tv: AOPC = (sum over k) / (K + 1) with K = 2
        *[("attattr", ALL, 0, k, d, 2 * d) for k, d in ((1, 0.3), (2, 0.6))],
        *[("random", ALL, 0, k, d, d) for k, d in ((1, 0.0), (2, 0.0))],
        *[("random", ALL, 1, k, d, d) for k, d in ((1, 0.6), (2, 0.6))],
    ], columns=["method", "scope", "idx", "k", "drop", "tv"])
    summary = deletion_summary(curves).set_index("method")
    assert summary.loc["attattr", "aopc"] == pytest.approx(0.3)
    assert summary.loc["attattr", "aopc_tv"] == pytest.approx(0.6)
    assert summary.loc["attattr", "aopc_random"] == pytest.approx(0.0)  # idx 0 only
    assert summary.loc["random", "aopc"] == pytest.approx(0.2)


def test_intervals_pairs_and_claims_from_per_example_values():
    rng = np.random.default_rng(0)
    rows = []
    for idx in range(40):
        # attattr better than attention by 0.2 ± 0.01 on deletion; the two tie on sufficiency,
        # where random is worse by 0.1 ± 0.01
        base = rng.normal(0.5, 0.1)
        rows += [("attattr", idx, "deletion_target", base + 0.2 + rng.normal(0, 0.01)),
                 ("attention", idx, "deletion_target", base),
                 ("random", idx, "deletion_target", base - 0.3),
                 ("attattr", idx, "sufficiency", base), ("attention", idx, "sufficiency", base),
                 ("random", idx, "sufficiency", base + 0.1 + rng.normal(0, 0.01))]
    values = pd.DataFrame(rows, columns=["method", "idx", "measure", "value"])
    table = intervals(values, reps=500, seed=0).set_index(["method", "measure"])
    cell = table.loc[("attattr", "deletion_target")]
    assert cell["examples"] == 40 and cell["low"] < cell["mean"] < cell["high"]
    # the interval of a mean of 40 values of sd 0.1: about ± 2·0.1/√40 = ± 0.03
    assert 0.03 < cell["high"] - cell["low"] < 0.1
    compared = pairs(values, reps=500, seed=0).set_index(["measure", "method", "other"])
    paired = compared.loc[("deletion_target", "attattr", "attention")]
    # paired on the examples: what the examples share cancels, and the interval is that of a
    # mean of 40 differences of sd 0.01, about ± 2·0.01/√40 = ± 0.003 (not the ± 0.03 unpaired)
    assert paired["difference"] == pytest.approx(0.2, abs=0.01)
    assert 0.002 < paired["high"] - paired["low"] < 0.01
    # sufficiency is better when lower: the orientation makes attattr's win positive
    assert compared.loc[("sufficiency", "attattr", "random"), "difference"] == pytest.approx(
        0.1, abs=0.005)  # 0.1 ± 0.01 on each of 40 examples
    judged = {c["claim"]: c for c in claims(table.reset_index(), compared.reset_index())}
    verdicts = {name: c["verdict"] for name, c in judged.items()}
    leader = judged["the leading method beats the runner-up on "
                    "edge deletion AOPC, target-class probability (signed)"]
    assert leader["verdict"] == "holds" and leader["kind"] == "finding"
    assert "attattr minus attention" in leader["metric"]  # the statement names no method
    assert (leader["value"], leader["n"]) == pytest.approx((0.2, 40), abs=0.01)
    assert leader["source"].startswith("our comparison")
    # a tie on every example: every resample gives 0, an interval of no width, which no
    # number of examples gives: not testable, with the interval shown
    tie = judged["AttAttr beats raw attention on token erasure sufficiency "
                 "(ERASER; lower is better)"]
    assert (tie["value"], tie["low"], tie["high"], tie["bar"]) == (0, 0, 0, 0.01)
    assert tie["verdict"] == "not testable"
    assert tie["reason"] == "every resample of the units gives 0: no interval"
    assert tie["source"].startswith("Hao et al. 2021, §1")
    assert verdicts["AttAttr beats random on token erasure sufficiency "
                    "(ERASER; lower is better)"] == "holds"
    assert verdicts["the leading method beats the runner-up on planted pair hit (strongest "
                    "edge of some layer joins it)"] == "not testable"
    reasons = {c["claim"]: c["reason"] for c in claims(table.reset_index(), compared.reset_index())}
    assert reasons["the leading method beats the runner-up on planted pair hit (strongest "
                   "edge of some layer joins it)"] == "fewer than two methods score this measure"


def test_the_registry_holds_every_method_module_once():
    modules = [import_module(f"attnlab.methods.{path.stem}")
               for path in Path(registry.__file__).parent.glob("*.py")]
    scoring = {module.__name__.rsplit(".", 1)[1] for module in modules if hasattr(module, "score")}
    # one module per method, named for it, each in the registry once
    assert sorted(TABLE_ORDER) == sorted(scoring)
    assert all(method.score is import_module(f"attnlab.methods.{method.name}").score
               for method in registry.METHODS)
    known = {"attention", "captured", "model", "engine", "batch_size", "variants", GRADIENTS}
    assert all(method.needs <= known for method in registry.METHODS)
    # each module named in an import statement of the registry, so that the code version of
    # the rules that score the methods follows it (tests/test_code_closure.py)
    assert {f"methods.{name}" for name in TABLE_ORDER} <= code_version.attnlab_imports(
        "methods.registry")


def test_every_method_scores_an_example_with_its_defining_property(bert_example):
    model, example = bert_example
    seconds = defaultdict(float)
    options = Options(methods=registry.METHODS, variants=Variants(), engine=ENGINE,
                      deletion_steps=3, erasure_bins=[0.5], batch_size=64, seed=0)
    scores = score_example(model, example, options, seconds)
    assert list(scores) == TABLE_ORDER
    for matrices in scores.values():
        assert matrices.shape == (3, 7, 7) and matrices.dtype == np.float64
    # raw attention: the heads' mean of the captured probabilities
    attention = example.probs.double().mean(dim=1).numpy()
    assert np.allclose(scores["attention"], attention)
    # rollout and (normalised) flow of one layer: its residual attention ½ A + ½ I; rollout
    # then multiplies the layers' residual attentions
    residual = 0.5 * attention + 0.5 * np.eye(7)
    assert np.allclose(scores["rollout"][0], residual[0])
    assert np.allclose(scores["rollout"][2], residual[2] @ residual[1] @ residual[0])
    assert np.allclose(scores["flow"][0], residual[0])
    # the methods whose rows are shares of a token's input: non-negative, summing to 1
    for name in ("attention", "rollout", "flow", "alti", "value_zeroing"):
        assert np.allclose(scores[name].sum(axis=-1), 1), name
        assert (scores[name] >= -1e-12).all(), name
    assert (scores["attention_norm"] >= 0).all() and (scores["globenc"] >= 0).all()
    # occlusion: the drop of F with one edge removed in every head, by its own forward pass
    for layer, i, j in [(0, 1, 2), (2, 6, 0)]:
        expected = _drop_without_edge(model, example, layer, i, j)
        assert scores["occlusion"][layer, i, j] == pytest.approx(expected, abs=1e-6)
    for layer in range(3):
        # AttAttr is complete: a layer's scores sum to F(A) - F(0·A^l), within the tolerance
        # the engine was given (1e-4)
        drop = example.f_full - f_scaled(model, example, layer, 0.0)
        assert scores["attattr"][layer].sum() == pytest.approx(drop, abs=1e-4)
        # attention x gradient: the slope of F(αA^l) at α = 1 (Euler's sum over the edges)
        assert scores["attention_x_gradient"][layer].sum() == pytest.approx(
            slope_at_one(model, example, layer), abs=1e-4)
    # every method is timed; the gradient methods (AttAttr, attention x gradient) run last
    gradients = [method.name for method in registry.METHODS if GRADIENTS in method.needs]
    assert {"attattr", "attention_x_gradient"} <= set(gradients)
    assert list(seconds) == [name for name in TABLE_ORDER if name not in gradients] + gradients


def _run_stage(tiny_shard, tmp_path: Path, **settings) -> dict[str, Path]:
    """Rule interaction_methods on two examples of the tiny shard, with the default config's
    interaction_methods settings but `settings`: its outputs."""
    task, model_dir, dev = tiny_shard
    run_shard(tiny_shard, tmp_path / "dump.parquet")
    config = validate_config({
        **copy.deepcopy(DEFAULT_CONFIG), "device": "cpu", "tasks": {"syn_mnli": task},
        "model": MODEL_CFG,
        "interaction_methods": {**DEFAULT_CONFIG["interaction_methods"], "examples": 2,
                                "deletion_steps": 3, "batch_size": 64, "bootstrap": 100,
                                **settings}})
    out = {name: tmp_path / f"{name}.parquet" for name in (
        "scores", "ground_truth", "deletion", "erasure", "intervals", "pairs", "claims")}
    out |= {"leaderboard": tmp_path / "leaderboard.html",
            "ground_truth_figure": tmp_path / "ground_truth.png",
            "deletion_figure": tmp_path / "deletion.png",
            "leaderboard_figure": tmp_path / "leaderboard.png"}
    interaction_methods.run(ModelJob.from_config(
        "interaction_methods", config, task="syn_mnli", outputs=out,
        inputs={"model": model_dir, "dev": dev, "parts": [tmp_path / "dump.parquet"],
                "finetune_metrics": learned_metrics(tmp_path)}))
    return out


def test_the_stage_scores_every_method_and_writes_tables_page_and_figures(tiny_shard, tmp_path):
    out = _run_stage(tiny_shard, tmp_path)
    scores = pd.read_parquet(out["scores"])
    assert list(scores["method"].unique()) == TABLE_ORDER
    assert "task" not in scores  # its folder, a partition of interaction_scores, names it
    assert (scores["scores"].map(len) == scores["n_tokens"] ** 2).all()
    examples = scores.groupby("method", sort=False)["idx"].unique()
    assert all(len(examples[method]) == 2 for method in TABLE_ORDER)  # flow on every example
    truth, deletion, table, verdicts = (pd.read_parquet(out[name]) for name in (
        "ground_truth", "deletion", "intervals", "claims"))
    assert (truth["task"] == "syn_mnli").all() and set(truth["method"]) == set(TABLE_ORDER)
    assert set(deletion["method"]) == {*TABLE_ORDER, "random"}
    # every measure of every method (and random, where it has one) on both models
    assert set(table["model"]) == {"trained", "untrained"}
    assert len(table) == 2 * (2 * len(TABLE_ORDER) + 4 * (len(TABLE_ORDER) + 1))
    assert (table["low"] <= table["mean"] + 1e-12).all()
    assert (table["mean"] <= table["high"] + 1e-12).all()
    assert len(verdicts) == 6 + 6 + 4  # the leader, AttAttr vs attention, AttAttr vs random
    page = out["leaderboard"].read_text()
    assert all(f"<td>{name}</td>" in page for name in TABLE_ORDER)
    assert all(out[f].stat().st_size for f in ("ground_truth_figure", "deletion_figure",
                                               "leaderboard_figure"))


def _transposed_attention(attention: np.ndarray) -> np.ndarray:
    return np.swapaxes(attention, 1, 2)


def test_a_new_method_is_its_module_and_its_registry_entry(tiny_shard, tmp_path, monkeypatch):
    """What docs/design.md says adding a method takes, and nothing else: a module with its
    `score` (here a module object of the test, head-mean attention read from key to query) and
    its entry in the registry. The schema then allows it and runs it by default, and the stage
    scores and judges it beside the others."""
    module = ModuleType("attnlab.methods.transposed")
    module.score = _transposed_attention
    monkeypatch.setitem(sys.modules, module.__name__, module)
    dummy = Method("transposed", "A^l transposed", "baseline", frozenset({"attention"}))
    monkeypatch.setattr(registry, "METHODS", (*registry.METHODS, dummy))
    methods = load_schema()["properties"]["interaction_methods"]["properties"]["methods"]
    assert methods["items"]["enum"][-1] == methods["default"][-1] == "transposed"
    assert validate_config(copy.deepcopy(
        {**DEFAULT_CONFIG, "interaction_methods": {}}))["interaction_methods"]["methods"] == [
        *TABLE_ORDER, "transposed"]
    out = _run_stage(tiny_shard, tmp_path, methods=["attention", "transposed"])
    rows = {method: frame.sort_values(["idx", "layer"]) for method, frame
            in pd.read_parquet(out["scores"]).groupby("method")}
    assert len(rows["transposed"]) == len(rows["attention"]) == 2 * 2  # 2 examples, 2 layers
    # its scores are its function's, row by row (one row an example's layer)
    for attention, transposed, n in zip(rows["attention"]["scores"], rows["transposed"]["scores"],
                                        rows["attention"]["n_tokens"], strict=True):
        assert np.array_equal(transposed.reshape(n, n), attention.reshape(n, n).T)
    table = pd.read_parquet(out["intervals"])
    assert {"trained", "untrained"} == set(table.loc[table["method"] == "transposed", "model"])
    assert "<td>transposed</td>" in out["leaderboard"].read_text()


# Decoders: F is the next token's probability at the last real token, only the causal edges
# i > j are scored and ranked, and ALTI and GlobEnc (post-LN encoder sublayers) are left out.
DECODER_METHODS = [method.name for method in registry.METHODS if method.decoders]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def decoder_example(request):
    """A random decoder with drawn biases (float64; Llama: grouped-query attention) and one
    prompt of 6 tokens, F the probability of a next token."""
    model = models.prepare_model(tiny_causal_lm(request.param))
    prompt = tiny_prompts(lengths=(6,))
    inputs = {k: v for k, v in prompt.items() if k != "labels"}
    return model, capture(model, inputs, target=int(prompt["labels"][0]))


def test_a_decoders_f_is_the_next_token_probability_of_the_stock_forward_pass(decoder_example):
    model, example = decoder_example
    with torch.no_grad():  # transformers' own forward pass and causal mask, no intervention
        stock = torch.softmax(model(**example.inputs).logits[0, -1], dim=-1)
    assert example.distribution.shape == (model.config.vocab_size,)
    # 1e-6 relative: capture's softmax is float32 (the model float64)
    assert example.f_full == pytest.approx(float(stock[example.target]), rel=1e-6)
    assert (example.probs.triu(diagonal=1) == 0).all()  # the captured attention is causal


def test_a_decoders_occlusion_and_gradient_keep_the_causal_mask(decoder_example):
    model, example = decoder_example
    n = example.n_tokens
    future = torch.ones(n, n).triu(diagonal=1).bool()
    scores = occlusion(model, example, batch_size=64)
    assert (scores[:, future] == 0).all() and (scores[:, ~future].abs() > 0).any()
    # zeroing every future edge of every layer changes nothing: they are masked already
    keep = {layer: (~future).double()[None] for layer in range(2)}
    masked = masked_probabilities(model, example, keep, batch_size=1)[0]
    assert float(masked[example.target]) == pytest.approx(example.f_full, rel=1e-6)
    for layer, i, j in [(0, 3, 1), (1, 5, 0)]:  # one edge against the whole forward pass
        expected = _drop_without_edge(model, example, layer, i, j)
        assert float(scores[layer, i, j]) == pytest.approx(expected, abs=1e-8)
    gradient = attention_x_gradient(model, example)
    assert (gradient[:, future] == 0).all()
    # the head-summed scores add up to the slope of F along αA: a central difference of a
    # float32 F (target_probability), so 1e-5, eps as in the BERT test
    eps = 1e-3
    for layer in range(2):
        with torch.no_grad():
            f = [float(target_probability(models.logits(model, example.inputs, Intervention(
                scale_layer=layer, scale=torch.tensor([alpha]))), example.target)[0])
                 for alpha in (1 - eps, 1 + eps)]
        assert float(gradient[layer].sum()) == pytest.approx((f[1] - f[0]) / (2 * eps), abs=1e-5)


def test_a_decoders_attention_norm_parts_rebuild_its_attention_output(decoder_example):
    """Kobayashi et al.'s parts Σ_h α^h_ij f^h(x_j), summed over j, plus W_O's bias, are the
    attention module's output (before the residual), for GPT-2 (Conv1D W_O) and Llama
    (grouped-query attention); float64, so 1e-10."""
    model, example = decoder_example
    seen = []
    module = models.family_of(model).layout.attention.split(".")
    hooks = []
    for block in models.layer_stack(model):
        attention = block
        for name in module:
            attention = getattr(attention, name)
        hooks.append(attention.register_forward_hook(
            lambda _module, _args, output: seen.append(output[0][0])))
    try:
        with torch.no_grad():
            model(**example.inputs)
    finally:
        for hook in hooks:
            hook.remove()
    for layer, expected in enumerate(seen):
        weight, bias = models.output_projection(model, layer)
        transformed = sublayer_parts.transformed_values(example.values[layer], weight)
        parts = sublayer_parts.head_parts(example.probs[layer], transformed)
        assert torch.allclose(parts.sum(dim=1) + bias, expected, rtol=0, atol=1e-10)
        assert torch.equal(parts.norm(dim=-1),
                           attention_norm(example.probs[layer], transformed))
        assert (parts[torch.ones(6, 6).triu(diagonal=1).bool()] == 0).all()


def test_a_decoder_gets_the_methods_that_apply_to_it_and_a_named_misfit_is_refused():
    every = [method.name for method in registry.METHODS]
    chosen, left_out = registry.chosen(every, decoder=True)
    assert [m.name for m in chosen] == DECODER_METHODS
    assert left_out == [name for name in every if name not in DECODER_METHODS]
    assert left_out == ["alti", "globenc"]  # the two that decompose a post-LN sublayer
    assert registry.chosen(every, decoder=False) == (list(registry.METHODS), [])
    with pytest.raises(ConfigError, match=r"^interaction_methods.methods: alti \(decomposing an "
                       r"encoder's post-LN attention sublayer\) cannot score .* the methods "
                       r"that can: " + ", ".join(DECODER_METHODS) + "$"):
        registry.chosen(["attention", "alti"], decoder=True)


def test_a_decoders_methods_are_judged_on_its_causal_edges_and_its_query_stays(decoder_example):
    """compare_methods on one decoder prompt: ranks among the n(n−1)/2 causal edges, at most
    that many deletion steps, and ERASER never removes the query (the position read)."""
    model, example = decoder_example
    n = example.n_tokens
    encoded = {**example.inputs, "labels": torch.tensor([example.target])}
    dump = pd.DataFrame({"idx": [0], "n_tokens": [n], "target": [example.target],
                         "planted_i": [n - 1], "planted_j": [2]})
    options = Options(methods=registry.chosen([m.name for m in registry.METHODS],
                                              decoder=True)[0],
                      variants=Variants(), engine=ENGINE, deletion_steps=n * n,
                      erasure_bins=[0.2, 1.0], batch_size=64, seed=0)
    result = compare_methods(model, encoded, dump, options, special_ids=[],
                             device=torch.device("cpu"))
    edges = n * (n - 1) // 2
    assert (result.ground_truth["rank"] <= edges).all()
    assert result.curves["k"].max() == edges
    # no method gives weight to a later key (value zeroing: 1 − cos of an unchanged state,
    # float64 rounding)
    for row in result.scores.itertuples():
        assert np.abs(np.triu(row.scores.reshape(n, n), 1)).max() <= 1e-7, row.method
    # bin 1.0 removes every ordinary token: all but the query, so F is that of the query alone
    alone = {k: v[:, -1:] for k, v in example.inputs.items()}
    with torch.no_grad():
        f_alone = float(target_probability(models.logits(model, alone), example.target)[0])
    full = result.erasure[result.erasure["bin"] == 1.0]
    assert np.allclose(full["comprehensiveness"], example.f_full - f_alone, atol=1e-6)
