"""Pruning: the masks remove the right heads, the curves are evaluations with those masks, and
each claim's verdict follows the curves (and flips when they violate it)."""

from __future__ import annotations

import copy
import functools
import json
import logging

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from conftest import DEFAULT_CONFIG, learned_metrics
from test_dumps import tiny_task_model
from tiny_models import tiny_batch, tiny_classifier

from attnlab.analyses import heads, pruning, verdicts
from attnlab.data.dumps import attributed_head_scores, write_dump
from attnlab.data.tasks import TaskSpec, load_split
from attnlab.engine import dump_rows, examples, models
from attnlab.engine.intervention import Intervention
from attnlab.model_job import ModelJob
from attnlab.plumbing.errors import AttnlabError, ConfigError
from attnlab.stages import head_importance, prune_eval


def test_per_layer_mask_removes_the_k_lowest_or_highest_heads_of_each_layer():
    scores = torch.tensor([[[0.3, 0.1, 0.4, 0.2], [4.0, 3.0, 2.0, 1.0]]])  # (N=1, L=2, H=4)
    lowest = pruning.per_layer_mask(scores, 1, "lowest")
    assert lowest.tolist() == [[[1, 0, 1, 1], [1, 1, 1, 0]]]
    highest = pruning.per_layer_mask(scores, 2, "highest")
    assert highest.tolist() == [[[0, 1, 0, 1], [0, 0, 1, 1]]]
    assert pruning.per_layer_mask(scores, 0, "lowest").all()
    assert not pruning.per_layer_mask(scores, 4, "highest").any()


@pytest.mark.parametrize("percent, masked", [(0, 0), (10, 1), (30, 4), (50, 6), (100, 12)])
def test_global_mask_removes_the_least_important_share(percent, masked):
    importance = np.arange(12.0)[::-1].reshape(3, 4)  # head (2, 3) is the least important
    mask = pruning.global_mask(importance, percent)
    assert int((mask == 0).sum()) == masked  # round(p/100 · 12), halves up (30 % → 3.6 → 4)
    removed = np.sort(importance[mask.numpy() == 0])
    assert np.array_equal(removed, np.arange(masked))


def test_curves_are_accuracies_of_the_masked_model(monkeypatch):
    model = models.prepare_model(tiny_classifier("bert", init=0.5))
    batch = tiny_batch("bert", (9, 6, 8, 7, 9, 5))
    rng = np.random.default_rng(1)  # (seed 0 draws what random_scores' first draw does)
    rankings = {pruning.PREDICTED: [rng.random((6, 3, 4))],
                pruning.ATTENTION: [rng.random((6, 3, 4))],
                pruning.RANDOM: pruning.random_scores((6, 3, 4), seed=0, draws=2)}
    passes = []
    outcomes = examples.outcomes
    with monkeypatch.context() as patch:
        patch.setattr(examples, "outcomes", lambda model, inputs, masks, batch_size: (
            passes.append((inputs["input_ids"], masks[0])),
            outcomes(model, inputs, masks, batch_size))[1])
        curves = pruning.per_layer_curves(model, batch, rankings, batch_size=4)
    # two orders of two rankings, the random one lowest first only; k = 0..4
    assert len(curves.table) == (2 * 2 + 1) * 5

    def tokens(ids):  # an example, whatever width its pass was cut to (padding is id 0)
        return tuple(ids[ids != 0].tolist())

    # every (example, mask row) pair of the curves runs once, whichever curve asks for it
    # first: the common ends (k = 0: every head; k = 4: none) once for all curves
    evaluated = [(tokens(ids), row.numpy().tobytes()) for ids_of_pass, mask in passes
                 for ids, row in zip(ids_of_pass, mask, strict=True)]
    needed = {(tokens(batch["input_ids"][i]), row.numpy().tobytes())
              for (ranking, _), draws in rankings.items() for scores in draws
              for order in pruning.ORDERS[:1 if ranking == "random" else 2] for k in range(5)
              for i, row in enumerate(pruning.per_layer_mask(torch.from_numpy(scores), k, order))}
    assert len(evaluated) == len(needed) and set(evaluated) == needed
    assert len(needed) < (2 * 2 + 2) * 5 * 6  # the ends are shared

    def accuracy(scores, k, order):
        mask = pruning.per_layer_mask(torch.from_numpy(scores), k, order)
        with torch.no_grad():
            pred = models.logits(model, batch, Intervention(head_mask=mask)).argmax(-1)
        return (pred == batch["labels"]).double().numpy()

    at = curves.table.set_index(["ranking", "order", "k"])["accuracy"]
    assert at["attention", "highest", 2] == pytest.approx(
        accuracy(rankings[pruning.ATTENTION][0], 2, "highest").mean())
    # the random curve: the mean of its draws, per example
    expected = np.mean([accuracy(s, 2, "lowest") for s in rankings[pruning.RANDOM]], axis=0)
    np.testing.assert_allclose(curves.correct[(*pruning.RANDOM, "lowest")][2], expected)
    assert at["random", "lowest", 2] == pytest.approx(expected.mean())

    arrays = {"attribution": rankings[pruning.PREDICTED][0],
              "attention": rankings[pruning.ATTENTION][0]}
    importance = heads.importance_table(model, batch, arrays, ["attribution", "random"], 2, 0)
    global_ = pruning.global_curves(model, batch, importance, [0, 50, 100], batch_size=4)
    assert len(global_.table) == 3 * 3  # attribution, random seeds 0 and 1
    full = examples.accuracy(model, batch)
    assert (global_.table.loc[global_.table["percent"] == 0, "accuracy"] == full).all()
    assert (global_.table.loc[global_.table["percent"] == 100, "heads_masked"] == 12).all()
    assert (global_.table["examples"] == 6).all()
    assert global_.correct[("random",)].shape == (3, 6)
    # a point inside a curve (its passes start at the mask's first masked layer): the accuracy
    # of a whole pass with its mask
    mask = pruning.global_mask(arrays["attribution"].mean(axis=0), 50)
    with torch.no_grad():
        pred = models.logits(model, batch, Intervention(head_mask=mask)).argmax(-1)
    at = global_.table.set_index(["method", "percent"])["accuracy"]
    assert at["attribution", 50] == pytest.approx(float((pred == batch["labels"]).double().mean()))


def test_the_gold_ranking_runs_only_the_misclassified_and_every_point_equals_a_full_pass(
        monkeypatch):
    """The gold label's ranking is the predicted label's wherever the prediction is right: its
    curves run only the misclassified examples, and every point is still what one plain pass of
    all examples with the whole mask gives. Correctness exactly; the mean gold-label probability
    to 1e-6: a pass of fewer, shorter examples takes another float32 path (measured 2.8e-7
    off), where another row's outcome moves it by 1e-2 (below)."""
    model = models.prepare_model(tiny_classifier("bert", init=0.5))
    batch = tiny_batch("bert", (9, 6, 8, 7, 9, 5))  # batches of 4 by length: padded passes
    with torch.no_grad():
        predicted = models.logits(model, batch).argmax(-1)
    wrong = torch.tensor([False, True, False, False, True, False])
    batch["labels"] = torch.where(wrong, (predicted + 1) % 3, predicted)
    rng = np.random.default_rng(0)
    own = rng.random((6, 3, 4))
    gold = own.copy()
    gold[wrong.numpy()] = rng.random((2, 3, 4))
    rankings = {pruning.PREDICTED: [own], pruning.GOLD: [gold]}
    evaluated = []
    outcomes = examples.outcomes
    monkeypatch.setattr(examples, "outcomes", lambda model, inputs, masks, batch_size: (
        evaluated.append(masks.shape[1]), outcomes(model, inputs, masks, batch_size))[1])
    curves = pruning.per_layer_curves(model, batch, rankings, batch_size=4)
    # the predicted ranking: 2 orders x 3 inner points and the two ends, every example; the gold
    # one adds its inner points for the 2 misclassified (seed 0: none of their rows happens to
    # be one of the predicted ranking's)
    assert sum(evaluated) == 6 * (2 * 3 + 2) + 2 * (2 * 3)
    at = curves.table.set_index(["label", "order", "k"])
    for label, scores in (("predicted", own), ("gold", gold)):
        for order in pruning.ORDERS:
            for k in range(5):
                mask = pruning.per_layer_mask(torch.from_numpy(scores), k, order)
                with torch.no_grad():
                    logits = models.logits(model, batch, Intervention(head_mask=mask)).double()
                right = (logits.argmax(-1) == batch["labels"]).double().numpy()
                prob = torch.softmax(logits, -1).gather(1, batch["labels"][:, None]).mean()
                np.testing.assert_array_equal(curves.correct["attribution", label, order][k],
                                              right)
                assert at.loc[(label, order, k), "gold_prob"] == pytest.approx(float(prob),
                                                                               abs=1e-6)
    # the two rankings' curves differ (measured: by up to 0.021), so that reusing the predicted
    # ranking's outcomes for the misclassified examples would fail the comparison above
    gold_prob = at["gold_prob"]
    assert (gold_prob["predicted"] - gold_prob["gold"]).abs().max() > 1e-2


def test_the_predicted_label_ranks_where_the_model_is_wrong():
    # 4 examples, 1 layer of 2 heads; the model is wrong on examples 1 and 3
    dumped = np.arange(8.0).reshape(4, 1, 2)  # attributions to the gold label
    labels, predicted = torch.tensor([0, 1, 2, 0]), torch.tensor([0, 2, 2, 1])
    asked = []

    def other(rows, target):
        asked.append((rows.tolist(), target.tolist()))
        return -dumped[rows]  # the other label ranks the heads the other way round

    by_label = pruning.label_rankings(dumped, "gold", predicted, labels, other)
    assert asked == [([1, 3], [2, 1])]  # only the misclassified, to their predicted labels
    np.testing.assert_array_equal(by_label["gold"], dumped)
    np.testing.assert_array_equal(by_label["predicted"][[0, 2]], dumped[[0, 2]])
    np.testing.assert_array_equal(by_label["predicted"][[1, 3]], -dumped[[1, 3]])
    # dumps of the predicted label: the gold one is what the misclassified are attributed to
    asked.clear()
    by_label = pruning.label_rankings(dumped, "pred", predicted, labels, other)
    assert asked == [([1, 3], [1, 0])]
    np.testing.assert_array_equal(by_label["predicted"], dumped)


def _correct(accuracies: list[float], n: int = 200) -> np.ndarray:
    """Per-example correctness (points, n) with the given accuracies, the examples right at
    each point the first ones (so that two points differ on as few examples as they can)."""
    return np.array([[1.0] * round(a * n) + [0.0] * (n - round(a * n)) for a in accuracies])


def _per_layer(low, high, attention_high, random=None, predicted_low=None) -> pruning.Curves:
    """Per-layer curves for H = 4 (k = 0..4) by their accuracies, attribution ranked by the
    gold label (the paper's ranking); the predicted label's lowest-first curve is
    `predicted_low` (default: the gold label's)."""
    correct = {(*pruning.GOLD, "lowest"): _correct(low),
               (*pruning.GOLD, "highest"): _correct(high),
               (*pruning.PREDICTED, "lowest"): _correct(predicted_low or low),
               (*pruning.PREDICTED, "highest"): _correct(high),
               (*pruning.ATTENTION, "lowest"): _correct(low),
               (*pruning.ATTENTION, "highest"): _correct(attention_high),
               (*pruning.RANDOM, "lowest"): _correct(random or high)}
    return pruning.Curves(pd.DataFrame(), correct)


def _verdicts(claims: list[dict]) -> list[str]:
    return [c["verdict"] for c in claims]


def _follow_from_intervals(claims: list[dict]) -> None:
    """Every verdict is the one its interval and bar give (verdicts.verdict), and every
    finding cites the paper, or this project where it is the project's own."""
    for c in claims:
        if c["verdict"] != "not testable":
            interval = verdicts.Interval(c["value"], c["low"], c["high"], c["n"])
            assert verdicts.verdict(interval, verdicts.Bar(c["bar"], c["side"])) == c["verdict"]
            assert c["low"] <= c["value"] <= c["high"]
        ours = c["stage"] == pruning.LABEL_STAGE
        assert c["source"].startswith("attnlab (this project)" if ours else "Hao"), c


def _paper(claims: list[dict]) -> list[dict]:
    """The paper's per-layer findings (Fig. 3), this project's left out."""
    return [c for c in claims if c["stage"] == "per_layer"]


def test_per_layer_findings_hold_on_paper_like_curves_and_flip_on_violating_ones():
    paper = _per_layer(low=[0.9, 0.9, 0.88, 0.7, 0.3], high=[0.9, 0.5, 0.4, 0.35, 0.3],
                       attention_high=[0.9, 0.8, 0.6, 0.5, 0.3])
    claims = pruning.per_layer_claims(paper)
    # the paper's four, the gold label's leak, the paper's four on the predicted label's ranking
    assert [c["stage"] for c in claims] == ["per_layer"] * 4 + [pruning.LABEL_STAGE] * 5
    assert _verdicts(_paper(claims)) == ["holds"] * 4
    # the same curves for both labels: the same verdicts on the predicted label's ranking
    assert _verdicts(claims[5:]) == ["holds"] * 4
    # the drop at half: 0.02 over 200 examples, interval about [0.005, 0.04], below 0.05
    assert claims[0]["value"] == pytest.approx(0.02) and claims[0]["high"] < 0.05
    _follow_from_intervals(claims)
    # low-attribution pruning collapses, high-attribution pruning is harmless, attention worse
    violated = _per_layer(low=[0.9, 0.6, 0.5, 0.4, 0.3], high=[0.9, 0.9, 0.88, 0.7, 0.3],
                          attention_high=[0.9, 0.5, 0.4, 0.35, 0.3])
    claims = pruning.per_layer_claims(violated)
    assert _verdicts(_paper(claims)) == ["does not hold"] * 4
    _follow_from_intervals(claims)
    # a drop of 0.05 exactly: its interval holds the bar, inconclusive whatever the estimate
    edge = pruning.per_layer_claims(_per_layer(
        low=[0.9, 0.9, 0.85, 0.7, 0.3], high=[0.9, 0.5, 0.4, 0.35, 0.3],
        attention_high=[0.9, 0.8, 0.6, 0.5, 0.3]))
    assert edge[0]["verdict"] == "inconclusive" and edge[0]["low"] < 0.05 < edge[0]["high"]


def test_the_paper_is_judged_on_the_gold_label_its_leak_and_the_predicted_label_are_ours():
    # ranked by the gold label, pruning the lowest heads even helps (the mask knows the
    # answer: 10 of 200 examples turn right at k = 2); ranked by the predicted label it costs
    # 30 points
    claims = pruning.per_layer_claims(_per_layer(
        low=[0.9, 0.95, 0.95, 0.9, 0.3], high=[0.9, 0.5, 0.4, 0.35, 0.3],
        attention_high=[0.9, 0.8, 0.6, 0.5, 0.3], predicted_low=[0.9, 0.8, 0.6, 0.5, 0.3]))
    _follow_from_intervals(claims)
    by_name = {c["claim"]: c for c in claims}
    paper = by_name["pruning low-attribution heads barely hurts"]
    assert paper["stage"] == "per_layer" and "to the gold label" in paper["metric"]
    assert paper["value"] == pytest.approx(-0.05) and paper["verdict"] == "holds"
    assert paper["source"].startswith("Hao et al. 2021, §4, Fig. 3")
    # the leak: accuracy with 2 of 4 heads pruned by the gold label, minus the unpruned
    # model's, with the paired interval of those two curves' points (10 examples of 200 gain 1,
    # none lose: about [0.02, 0.08], above one point)
    leak = by_name[pruning.LEAK]
    gold = _correct([0.9, 0.95, 0.95, 0.9, 0.3])
    expected = verdicts.difference(gold[2], gold[0], paired=True, scale=verdicts.SIGNED_UNIT)
    assert (leak["value"], leak["low"], leak["high"], leak["n"]) == pytest.approx(
        (0.05, expected.low, expected.high, 200))
    assert leak["low"] > verdicts.ONE_POINT and leak["verdict"] == "holds"
    assert leak["stage"] == pruning.LABEL_STAGE
    assert leak["source"].startswith("attnlab (this project), per-layer pruning")
    ours = by_name["pruning low-attribution heads barely hurts, ranked by the predicted label"]
    assert ours["stage"] == pruning.LABEL_STAGE and "to the predicted label" in ours["metric"]
    assert ours["value"] == pytest.approx(0.3) and ours["verdict"] == "does not hold"
    assert ours["source"].startswith("attnlab (this project)")
    # a gold ranking that costs accuracy has a negative leak, which does not hold
    costly = pruning.per_layer_claims(_per_layer(
        low=[0.9, 0.85, 0.8, 0.5, 0.3], high=[0.9, 0.5, 0.4, 0.35, 0.3],
        attention_high=[0.9, 0.8, 0.6, 0.5, 0.3]))
    leak = next(c for c in costly if c["claim"] == pruning.LEAK)
    assert leak["value"] == pytest.approx(-0.1) and leak["verdict"] == "does not hold"


def _global(curves: dict[str, list[float]]) -> pruning.Curves:
    return pruning.Curves(pd.DataFrame(), {(m, ): _correct(a) for m, a in curves.items()})


PERCENTS = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
# 200 evaluation examples of two classes, 120 of the first: chance is 0.6
LABELS = torch.tensor([0] * 120 + [1] * 80)


def test_retention_is_measured_above_chance():
    assert examples.chance(LABELS) == pytest.approx(0.6)
    good = [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.85, 0.85, 0.84, 0.6]
    claims = pruning.global_claims(_global({"attribution": good}), PERCENTS, LABELS)
    (kept,) = claims
    # (0.84 - 0.6) / (0.9 - 0.6) = 0.8, where the raw ratio 0.84 / 0.9 would read 0.93
    assert kept["value"] == pytest.approx(0.8) and kept["verdict"] == "holds"
    assert kept["low"] > pruning.RETENTION_BAR and "our choice" in kept["metric"]
    # at chance with every head (an untrained model): retention is not defined
    flat = pruning.global_claims(_global({"attribution": [0.6] * 11}), PERCENTS, LABELS)
    assert flat[0]["verdict"] == "not testable" and "not above chance" in flat[0]["reason"]


def test_global_findings_hold_on_paper_like_curves_and_flip_on_violating_ones():
    # retention above chance at 90 %: (0.88 - 0.6) / (0.95 - 0.6) = 0.8 (at 0.8 it would be
    # 0.57, whose interval over 200 examples still holds 0.5: inconclusive)
    good = [0.95, 0.95, 0.94, 0.93, 0.92, 0.91, 0.9, 0.9, 0.89, 0.88, 0.6]
    bad = [0.95, 0.7, 0.65, 0.62, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    # taylor about as good (identical curves would tie on every example: an interval of no
    # width, which is not judged)
    close = [0.95, 0.94, 0.94, 0.92, 0.92, 0.9, 0.9, 0.89, 0.89, 0.87, 0.6]
    paper = pruning.global_claims(_global({"attribution": good, "taylor": close, "random": bad}),
                                  PERCENTS, LABELS)
    assert _verdicts(paper) == ["holds"] * 3
    _follow_from_intervals(paper)
    violated = pruning.global_claims(
        _global({"attribution": bad, "taylor": good, "random": good}), PERCENTS, LABELS)
    assert _verdicts(violated) == ["does not hold"] * 3
    _follow_from_intervals(violated)
    # claims about methods that were not run are left out
    assert [c["claim"] for c in pruning.global_claims(_global({"attribution": good}), PERCENTS,
                                                      LABELS)] == [
        "keeping 10% of heads (by attribution) keeps most of the accuracy"]
    assert pruning.global_claims(_global({"taylor": good}), PERCENTS, LABELS) == []


def test_the_heads_that_score_are_not_those_that_evaluate():
    split = functools.partial(heads.evaluation_split, importance_examples=200,
                              min_evaluation=50, task="t")
    assert split(300, 250) == 200
    # fewer attributed than asked: all of them score, the rest evaluate
    assert split(300, 120) == 120
    with pytest.raises(ConfigError, match=r"heads.importance_examples = 200 takes 200 of the "
                                          r"200 dev examples of task t, which leaves 0 .* fewer "
                                          r"than heads.min_evaluation_examples = 50"):
        split(200, 200)


ATTRIBUTED = 6  # of 8 dev examples


@pytest.fixture
def head_task(tmp_path, pair_task):
    """What the head stages read of a task: a saved tiny random BERT (3 layers of 4 heads), a
    dev split of 8 examples and dumps (two shards) of random per-head maxima of its first 6.
    Returns the config and the inputs."""
    tiny_task_model(tmp_path, pair_task, n_dev=8, layers=3, init=0.5)
    spec = TaskSpec.from_config("syn_mnli", pair_task)
    idx = load_split(tmp_path / "dev.parquet", spec)["idx"].tolist()
    rng = np.random.default_rng(0)
    parts = []
    for shard, rows in enumerate((range(0, 3), range(3, ATTRIBUTED))):
        parts.append(str(tmp_path / f"part{shard}.parquet"))
        write_dump([{"idx": idx[i], "attr_max": rng.random(12).tolist(),
                     "attn_max": rng.random(12).tolist()} for i in rows], parts[-1],
                   {"n_layers": 3, "n_heads": 4, "shard": shard, "n_shards": 2})
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["tasks"] = {"syn_mnli": pair_task}
    config["heads"].update(methods=["attribution", "attention", "taylor", "random"],
                           importance_examples=4, min_evaluation_examples=4, random_seeds=2,
                           batch_size=3, prune_percents=[0, 50, 100])
    config["device"] = "cpu"
    inputs = {"parts": parts, "model": str(tmp_path / "model"),
              "dev": str(tmp_path / "dev.parquet"), "finetune_metrics": learned_metrics(tmp_path)}
    return config, inputs


def _job(rule: str, head_task, outputs: dict, **inputs) -> ModelJob:
    config, task_inputs = head_task
    return ModelJob.from_config(rule, config, task="syn_mnli", inputs={**task_inputs, **inputs},
                                outputs=outputs)


def test_the_head_stages_score_and_prune_the_attributed_examples(head_task, tmp_path):
    importance = str(tmp_path / "importance.parquet")
    head_importance.run(_job("head_importance", head_task, {"importance": importance}))
    table = pd.read_parquet(importance)
    assert (table["task"] == "syn_mnli").all()
    assert table.groupby("method", sort=False).size().to_dict() == {
        "attribution": 12, "attention": 12, "taylor": 12, "random": 2 * 12}
    # the dump-based scores average the dump over the first heads.importance_examples examples
    dump = pd.concat([pd.read_parquet(p) for p in head_task[1]["parts"]])
    for method, column in (("attribution", "attr_max"), ("attention", "attn_max")):
        expected = np.stack(dump[column].to_numpy())[:4].mean(axis=0)
        np.testing.assert_allclose(table.loc[table["method"] == method, "importance"], expected)
    assert json.loads(pq.read_schema(importance).metadata[b"attnlab"])["examples"] == 4

    out = {name: str(tmp_path / f"{name}.parquet") for name in ("per_layer", "global_", "claims")}
    prune_eval.run(_job("prune_eval", head_task, out, importance=importance))
    config = head_task[0]
    model, tokenizer = models.load_classifier(head_task[1]["model"], torch.device("cpu"))
    spec = TaskSpec.from_config("syn_mnli", config["tasks"]["syn_mnli"])
    dev = examples.encoded_examples(head_task[1]["dev"], spec, tokenizer, config["model"])
    per_layer, global_ = pd.read_parquet(out["per_layer"]), pd.read_parquet(out["global_"])
    # per-layer pruning on the attributed examples; global pruning on the 4 dev examples
    # after the 4 that scored the heads, none of them in both
    attributed = {k: v[:ATTRIBUTED] for k, v in dev.items()}
    assert (per_layer.loc[per_layer["k"] == 0, "accuracy"] == examples.accuracy(
        model, attributed)).all()
    evaluation = {k: v[4:] for k, v in dev.items()}
    assert (global_.loc[global_["percent"] == 0, "accuracy"] == examples.accuracy(
        model, evaluation)).all()
    assert (global_["examples"] == 4).all() and (per_layer["examples"] == ATTRIBUTED).all()
    meta = json.loads(pq.read_schema(out["global_"]).metadata[b"attnlab"])
    assert (meta["importance_examples"], meta["evaluation_examples"]) == (4, 4)
    # attribution by the predicted and by the gold label, attention: both orders; random:
    # lowest first (the mean of 2 draws); k = 0..4
    assert per_layer.groupby(["ranking", "label"]).size().to_dict() == {
        ("attention", ""): 10, ("attribution", "gold"): 10, ("attribution", "predicted"): 10,
        ("random", ""): 5}
    assert len(global_) == (3 + 2) * 3
    claims = pd.read_parquet(out["claims"])
    assert set(claims["stage"]) == {"per_layer", pruning.LABEL_STAGE, "global"}
    assert (claims["kind"] == "finding").all()
    # the paper's per-layer findings are judged on the gold label's ranking, this project's
    # (the leak, the predicted label's) cite the project
    stages = claims.set_index("claim")["stage"]
    assert stages[pruning.LEAK] == pruning.LABEL_STAGE
    paper = claims[claims["stage"] == "per_layer"]
    assert len(paper) == 4 and paper["metric"].str.contains("to the gold label").all()
    assert claims.loc[claims["stage"] == pruning.LABEL_STAGE, "source"].str.startswith(
        "attnlab (this project)").all()

    # the random model is wrong on some attributed examples: those are ranked by their
    # attributions to the predicted label, computed as rule attribute would with target pred
    predicted = examples.predict(model, attributed).argmax(-1)
    wrong = (predicted != attributed["labels"]).nonzero().flatten().numpy()
    assert 0 < len(wrong) < ATTRIBUTED
    frame = load_split(head_task[1]["dev"], spec).iloc[wrong]
    settings = {**config["attribution"], "target": "pred", "batch_size": 8}
    rows = dump_rows.dump_rows(model, tokenizer, frame, spec, settings, config["model"]).rows
    expected = np.stack(dump["attr_max"].to_numpy()).reshape(ATTRIBUTED, 3, 4)
    expected[wrong] = np.stack([r["attr_max"] for r in rows]).reshape(len(wrong), 3, 4)
    curve = pruning.per_layer_curves(model, attributed, {pruning.PREDICTED: [expected]})
    stage = per_layer[per_layer["label"] == "predicted"].reset_index(drop=True)
    # adaptive quadrature in one batch or another: the same maxima to its tolerance, and so
    # the same head order
    np.testing.assert_allclose(stage["accuracy"], curve.table["accuracy"])


def test_on_a_model_that_did_not_learn_its_task_the_pruning_findings_are_not_testable(
        head_task, tmp_path):
    """The same stages, told by fine-tuning's metrics that the model is at chance: pruning an
    untrained model's heads cannot hurt what it never learned, so every finding (each about
    what training put into the heads) is not testable, with the reason; the numbers stay."""
    importance = str(tmp_path / "importance.parquet")
    head_importance.run(_job("head_importance", head_task, {"importance": importance}))
    out = {name: str(tmp_path / f"{name}.parquet") for name in ("per_layer", "global_", "claims")}
    at_chance = learned_metrics(tmp_path / "chance", accuracy=0.47, n=200, chance=0.5)
    prune_eval.run(_job("prune_eval", head_task, out, importance=importance,
                        finetune_metrics=at_chance))
    claims = pd.read_parquet(out["claims"])
    assert len(claims) and (claims["verdict"] == "not testable").all()
    assert claims["reason"].str.startswith("the model did not learn its task: dev accuracy "
                                           "0.47").all()
    judged = claims[claims["value"].notna()]
    assert len(judged) >= 4 and judged["low"].notna().all()


def test_a_split_that_leaves_too_few_to_evaluate_is_refused(head_task, tmp_path):
    head_task[0]["heads"]["importance_examples"] = 6
    with pytest.raises(ConfigError, match="which leaves 2 to evaluate global pruning, fewer "
                                          "than heads.min_evaluation_examples = 4"):
        head_importance.run(_job("head_importance", head_task,
                                 {"importance": str(tmp_path / "importance.parquet")}))


def test_dumps_of_other_examples_or_heads_fail_in_one_line(head_task, caplog):
    _, inputs = head_task
    dev = pd.read_parquet(inputs["dev"])
    with caplog.at_level(logging.WARNING, logger="attnlab"):
        scores = attributed_head_scores(inputs["parts"], dev, head_shape=(3, 4), target="pred")
    assert scores["attention"].shape == (ATTRIBUTED, 3, 4)
    assert "head rankings use attributions to the predicted label" in caplog.text
    with pytest.raises(AttnlabError, match="the attribution dump has 3x4 heads, the model "
                                           r"\(2, 4\): rebuild it with --forcerun attribute"):
        attributed_head_scores(inputs["parts"], dev, head_shape=(2, 4), target="gold")
    with pytest.raises(AttnlabError, match="rows are not the first dev examples in order"):
        attributed_head_scores(inputs["parts"], dev.iloc[::-1], head_shape=(3, 4), target="gold")
