"""Pruning: the masks remove the right heads, the curves are evaluations with those masks, and
each claim's verdict follows the curves (and flips when they violate it)."""

from __future__ import annotations

import copy
import json
import logging

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from conftest import DEFAULT_CONFIG
from test_dumps import tiny_task_model
from tiny_models import tiny_batch, tiny_classifier

from attnlab.analyses import heads, pruning
from attnlab.data.dumps import attributed_head_scores, write_dump
from attnlab.data.tasks import TaskSpec, load_split
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention
from attnlab.model_job import ModelJob
from attnlab.plumbing.errors import AttnlabError
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
    rng = np.random.default_rng(0)
    arrays = {"attribution": rng.random((6, 3, 4)), "attention": rng.random((6, 3, 4))}
    masks = []
    predict = examples.predict
    monkeypatch.setattr(examples, "predict", lambda model, inputs, mask, batch_size: (
        masks.append(mask), predict(model, inputs, mask, batch_size))[1])
    curves = pruning.per_layer_curves(model, batch, arrays, batch_size=4)
    assert len(curves) == 2 * 2 * 5
    # the curves' common ends (k = 0: every head; k = 4: none) run once, not four times
    assert len(masks) == 2 * 2 * 3 + 2
    assert len({mask.numpy().tobytes() for mask in masks}) == len(masks)
    row = curves[(curves["ranking"] == "attention") & (curves["order"] == "highest")
                 & (curves["k"] == 2)].iloc[0]
    mask = pruning.per_layer_mask(torch.from_numpy(arrays["attention"]), 2, "highest")
    with torch.no_grad():
        pred = models.logits(model, batch, Intervention(head_mask=mask)).argmax(-1)
    assert row["accuracy"] == pytest.approx(float((pred == batch["labels"]).double().mean()))

    importance = heads.importance_table(model, batch, arrays, ["attribution", "random"], 2, 0)
    global_ = pruning.global_curves(model, batch, importance, [0, 50, 100], batch_size=4)
    assert len(global_) == 3 * 3  # attribution, random seeds 0 and 1
    full = examples.accuracy(model, batch)
    assert (global_.loc[global_["percent"] == 0, "accuracy"] == full).all()
    assert (global_.loc[global_["percent"] == 100, "heads_masked"] == 12).all()


def _per_layer(low: list[float], high: list[float], attention_high: list[float]) -> pd.DataFrame:
    """Per-layer curves for H = 4 (k = 0..4); attention lowest-first mirrors attribution's."""
    rows = []
    for (ranking, order), accuracy in {("attribution", "lowest"): low,
                                       ("attribution", "highest"): high,
                                       ("attention", "lowest"): low,
                                       ("attention", "highest"): attention_high}.items():
        rows += [{"ranking": ranking, "order": order, "k": k, "accuracy": a}
                 for k, a in enumerate(accuracy)]
    return pd.DataFrame(rows)


def _verdicts(claims: list[dict]) -> list[str]:
    return [c["verdict"] for c in claims]


def test_per_layer_claims_hold_on_paper_like_curves_and_flip_on_violating_ones():
    paper = _per_layer(low=[0.9, 0.9, 0.88, 0.7, 0.3], high=[0.9, 0.5, 0.4, 0.35, 0.3],
                       attention_high=[0.9, 0.8, 0.6, 0.5, 0.3])
    assert _verdicts(pruning.per_layer_claims(paper)) == ["holds"] * 3
    # low-attribution pruning collapses, high-attribution pruning is harmless, attention worse
    violated = _per_layer(low=[0.9, 0.6, 0.5, 0.4, 0.3], high=[0.9, 0.9, 0.88, 0.7, 0.3],
                          attention_high=[0.9, 0.5, 0.4, 0.35, 0.3])
    assert _verdicts(pruning.per_layer_claims(violated)) == ["does not hold"] * 3


def _global(curves: dict[str, list[float]]) -> pd.DataFrame:
    percents = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    return pd.DataFrame([{"method": m, "seed": None, "percent": p, "accuracy": a}
                         for m, accuracy in curves.items()
                         for p, a in zip(percents, accuracy, strict=True)])


def test_global_claims_hold_on_paper_like_curves_and_flip_on_violating_ones():
    good = [0.84, 0.84, 0.83, 0.82, 0.8, 0.78, 0.75, 0.72, 0.68, 0.62, 0.33]
    bad = [0.84, 0.7, 0.6, 0.5, 0.45, 0.4, 0.38, 0.36, 0.35, 0.34, 0.33]
    paper = _global({"attribution": good, "taylor": good, "random": bad})
    assert _verdicts(pruning.global_claims(paper)) == ["holds"] * 3
    violated = _global({"attribution": bad, "taylor": good, "random": good})
    assert _verdicts(pruning.global_claims(violated)) == ["does not hold"] * 3
    # claims about methods that were not run are left out
    assert [c["claim"] for c in pruning.global_claims(_global({"attribution": good}))] == [
        "keeping 10% of heads (by attribution) keeps most of the accuracy"]
    assert pruning.global_claims(_global({"taylor": good})) == []


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
                           importance_examples=4, random_seeds=2, batch_size=3,
                           prune_percents=[0, 50, 100])
    config["device"] = "cpu"
    inputs = {"parts": parts, "model": str(tmp_path / "model"),
              "dev": str(tmp_path / "dev.parquet")}
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
    model, tokenizer = models.load_classifier(head_task[1]["model"], torch.device("cpu"))
    spec = TaskSpec.from_config("syn_mnli", head_task[0]["tasks"]["syn_mnli"])
    dev = examples.encoded_examples(head_task[1]["dev"], spec, tokenizer, DEFAULT_CONFIG["model"])
    per_layer, global_ = pd.read_parquet(out["per_layer"]), pd.read_parquet(out["global_"])
    # per-layer pruning on the attributed examples, global pruning on the whole dev split
    attributed = {k: v[:ATTRIBUTED] for k, v in dev.items()}
    assert (per_layer.loc[per_layer["k"] == 0, "accuracy"] == examples.accuracy(
        model, attributed)).all()
    assert (global_.loc[global_["percent"] == 0, "accuracy"] == examples.accuracy(
        model, dev)).all()
    assert len(per_layer) == 2 * 2 * 5 and len(global_) == (3 + 2) * 3
    assert set(pd.read_parquet(out["claims"])["stage"]) == {"per_layer", "global"}


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
