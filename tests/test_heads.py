"""Head importance: masking is exact, Taylor is the true gradient, the methods compute what they
say, and the config refuses unknown methods."""

from __future__ import annotations

import copy
import logging

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import gate_central_difference, learned_metrics
from scipy import stats
from test_config import default_config, dry_run
from tiny_models import (
    CAUSAL_FAMILIES,
    FAMILIES,
    LENGTHS,
    tiny_batch,
    tiny_causal_lm,
    tiny_classifier,
    tiny_prompts,
    without_labels,
)

from attnlab.analyses import heads, task_correlation
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention
from attnlab.job import Job
from attnlab.plumbing.errors import ConfigError
from attnlab.stages import task_correlation as task_correlation_stage


@pytest.mark.parametrize("layer, head", [(0, 0), (1, 2), (2, 3)])
def test_masking_a_head_equals_zeroing_its_value_projection(layer, head):
    """A masked head contributes exactly 0 before the output projection, as a head whose value
    vectors are 0 does. 1e-6: the two runs multiply different (but equivalent) tensors, so the
    float32 kernels may round in a different order; a leak of the head (weights ~0.1) would move
    the logits by far more (checked: masking does change them)."""
    batch = without_labels(tiny_batch("bert", LENGTHS))
    stock = tiny_classifier("bert")
    value = stock.bert.encoder.layer[layer].attention.self.value
    size = value.out_features // stock.config.num_attention_heads
    with torch.no_grad():
        value.weight[head * size:(head + 1) * size] = 0
        value.bias[head * size:(head + 1) * size] = 0
        expected = stock(**batch).logits
        ours = models.prepare_model(tiny_classifier("bert"))
        mask = torch.ones(3, 4)
        mask[layer, head] = 0
        masked = models.logits(ours, batch, Intervention(head_mask=mask))
        assert torch.allclose(masked, expected, rtol=0, atol=1e-6)
        assert (masked - models.logits(ours, batch)).abs().max() > 1e-4


def test_all_ones_mask_is_bit_identical_to_no_mask():
    """Multiplying by 1.0 is exact in floating point, for shared and per-example masks."""
    batch = without_labels(tiny_batch("bert", LENGTHS))
    model = models.prepare_model(tiny_classifier("bert"))
    with torch.no_grad():
        plain = models.logits(model, batch)
        assert torch.equal(models.logits(model, batch, Intervention(head_mask=torch.ones(3, 4))),
                           plain)
        per_example = torch.ones(len(LENGTHS), 3, 4)
        assert torch.equal(models.logits(model, batch, Intervention(head_mask=per_example)),
                           plain)
        assert torch.equal(examples.predict(model, tiny_batch("bert", LENGTHS), per_example, 4),
                           examples.predict(model, tiny_batch("bert", LENGTHS), None, 4))


def _model_and_examples(family):
    """A tiny model of `family` and 6 examples of different lengths (right padding); a
    classifier in float32, a decoder (whose classes are next tokens) in float64."""
    if family in CAUSAL_FAMILIES:
        return (models.prepare_model(tiny_causal_lm(family)),
                tiny_prompts(lengths=(7, 4, 6, 5, 7, 3)))
    return models.prepare_model(tiny_classifier(family, init=0.5)), tiny_batch(family, LENGTHS)


@pytest.mark.parametrize("family", FAMILIES + CAUSAL_FAMILIES)
def test_outcomes_under_many_masks_start_late_and_equal_whole_passes(family):
    """examples.outcomes runs a batch's masks from the unmasked hidden states entering each
    mask's first masked layer, and gives what `examples.predict`'s whole passes under each mask,
    in the same batches (4 by length, padded), give. Exactly: a mask's 1s leave the layers below
    its first 0 as they are unmasked, bit for bit (test_all_ones_mask_is_bit_identical_to_no_mask),
    and a pass from a hidden state equals a whole one bit for bit (test_intervention.py's
    test_split_forward_equals_whole_forward). Masking a head moves the probabilities by 1e-2 or
    more here (checked below), so a pass that started too late would show."""
    model, batch = _model_and_examples(family)
    n_layers, n_heads = models.head_shape(model)
    n = len(batch["labels"])
    shared = torch.ones(5, n_layers, n_heads)  # the first keeps every head
    shared[1, 0, 1] = shared[2, 1, 0] = shared[3, -1, 2] = 0
    shared[4] = shared[2]  # a mask asked twice runs once
    # per example, a head of another layer: a batch starts at its rows' first masked layer
    own = torch.ones(2, n, n_layers, n_heads)
    own[0, torch.arange(n), torch.arange(n) % n_layers, 1] = 0
    own[1, :, -1, 3] = 0
    layers_run = []  # one entry per layer a pass runs
    hooks = [layer.register_forward_pre_hook(lambda *_: layers_run.append(1))
             for layer in models.layer_stack(model)]
    for masks in (shared, own):
        layers_run.clear()
        correct, prob = examples.outcomes(model, batch, masks, batch_size=4)
        passes = len(layers_run)
        for mask, right, p in zip(masks, correct, prob, strict=True):
            logits = examples.predict(model, batch, mask, batch_size=4).double()
            whole = torch.softmax(logits, -1).gather(1, batch["labels"][:, None])[:, 0]
            assert torch.equal(right, (logits.argmax(-1) == batch["labels"]).double())
            assert torch.equal(p, whole)
        # two batches; in each, the unmasked layers up to the latest start, then every distinct
        # mask from its start (a family run whole: every layer of every pass)
        if models.family_of(model).split:
            starts = [n_layers, 0, 1, n_layers - 1] if masks is shared else [0, n_layers - 1]
            assert passes == 2 * (max(starts) + sum(n_layers - s for s in starts))
        else:
            assert passes == 2 * len(masks.unique(dim=0)) * n_layers
    for hook in hooks:
        hook.remove()
    # the masks change the probabilities (the comparison is not of one pass with itself)
    assert (prob - examples.outcomes(model, batch, shared[:1])[1]).abs().max() > 1e-2


def test_taylor_gradients_match_finite_differences():
    """∂L(x)/∂ξ_h per example against a central difference in float64 (error ~eps² ≈ 1e-12,
    far below the 1e-3 relative tolerance). Batches of 4 over 6 examples: the padding and the
    split into batches must not mix examples."""
    model = models.prepare_model(tiny_classifier("bert", dtype=torch.float64))
    batch = tiny_batch("bert", LENGTHS)
    grads = heads.taylor_gradients(model, batch, batch_size=4)
    assert grads.shape == (len(LENGTHS), 3, 4)
    for layer, head in [(0, 1), (1, 3), (2, 0)]:
        numeric = gate_central_difference(model, batch, layer, head, eps=1e-6)
        assert torch.allclose(grads[:, layer, head], numeric, rtol=1e-3, atol=1e-9)


def test_taylor_importance_is_mean_absolute_gradient_normalised_per_layer():
    model = models.prepare_model(tiny_classifier("bert", dtype=torch.float64))
    batch = tiny_batch("bert", LENGTHS)
    scores = heads.taylor_importance(model, batch, batch_size=4)
    raw = heads.taylor_gradients(model, batch).abs().mean(dim=0).numpy()
    np.testing.assert_allclose(np.linalg.norm(scores, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(scores * np.linalg.norm(raw, axis=1, keepdims=True), raw,
                               rtol=1e-10)


def test_accuracy_difference_equals_direct_evaluation():
    """Labels = the unmasked predictions, so acc(all) = 1 and each head's score is the share of
    predictions its masking flips, computed here in one unbatched forward pass."""
    model = models.prepare_model(tiny_classifier("bert", init=0.5))
    batch = tiny_batch("bert", (9, 6, 8, 7, 9, 5, 8, 9, 6, 7, 9, 8))
    with torch.no_grad():
        batch["labels"] = models.logits(model, batch).argmax(-1)
        scores = heads.accuracy_difference_importance(model, batch, batch_size=5)
        for layer in range(3):
            for head in range(4):
                mask = torch.ones(3, 4)
                mask[layer, head] = 0
                pred = models.logits(model, batch, Intervention(head_mask=mask)).argmax(-1)
                direct = 1.0 - float((pred == batch["labels"]).double().mean())
                assert scores[layer, head] == pytest.approx(direct, abs=1e-12)
    assert scores.max() > 0  # some head matters, so the comparison is not vacuous


def _dump_arrays(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"attribution": rng.random((n, 3, 4)), "attention": rng.random((n, 3, 4))}


def test_importance_table_is_tidy_and_dump_methods_average_the_dump():
    model = models.prepare_model(tiny_classifier("bert"))
    batch = tiny_batch("bert", LENGTHS)
    arrays = _dump_arrays(len(LENGTHS))
    table = heads.importance_table(model, batch, arrays, list(heads.METHODS), random_seeds=3,
                                   seed=0, batch_size=4)
    assert list(table.columns) == ["method", "seed", "layer", "head", "importance"]
    counts = table.groupby("method").size()
    assert counts["random"] == 3 * 12 and counts["taylor"] == 12
    assert table.loc[table["method"] != "random", "seed"].isna().all()
    attribution = table[table["method"] == "attribution"].sort_values(["layer", "head"])
    np.testing.assert_allclose(attribution["importance"], arrays["attribution"].mean(0).ravel())
    # seeded: the same seed gives the same random scores, another seed other ones
    assert np.array_equal(heads.random_importance(3, 4, 0, 1), heads.random_importance(3, 4, 0, 1))
    assert not np.array_equal(heads.random_importance(3, 4, 0, 1),
                              heads.random_importance(3, 4, 0, 2))


def test_fewer_held_out_examples_than_requested_uses_all_and_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="attnlab"):
        assert examples.held_out(200, 6) == 6
    assert "200 held-out examples requested but only 6 attributed; using 6" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnlab"):
        assert examples.held_out(200, 300) == 200
    assert caplog.text == ""


def _importance(seed: int = 1) -> pd.DataFrame:
    """Attribution importance of tasks a and b (nearly the same heads matter) and c (others)."""
    rng = np.random.default_rng(seed)
    base = rng.random(16)
    vectors = {"a": base, "b": base + 0.05 * rng.random(16), "c": rng.random(16)}
    layers, head_index = np.divmod(np.arange(16), 4)
    return pd.concat([pd.DataFrame({"task": t, "method": "attribution", "layer": layers,
                                    "head": head_index, "importance": v})
                      for t, v in vectors.items()])


def test_spearman_is_pearson_of_the_ranks_and_ignores_a_monotone_transform():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    sample = np.stack([x, np.exp(x)], axis=-1)[None]  # one resample, 5 heads, 2 tasks
    assert task_correlation.correlation(sample, 0, 1, "spearman")[0] == pytest.approx(1.0)
    assert task_correlation.correlation(sample, 0, 1, "pearson")[0] < 0.95
    # a known ranking: 1 2 3 4 5 against 2 1 4 3 5 is rho = 1 - 6 * 4 / (5 * 24) = 0.8
    swapped = np.stack([x, [2.0, 1.0, 4.0, 3.0, 5.0]], axis=-1)[None]
    assert task_correlation.correlation(swapped, 0, 1, "spearman")[0] == pytest.approx(0.8)
    # a resample of one head repeated has no correlation to measure
    same = np.stack([np.ones(5), np.ones(5)], axis=-1)[None]
    assert task_correlation.correlation(same, 0, 1, "pearson")[0] == 0


def test_task_correlations_have_intervals_over_heads_a_floor_and_a_ceiling():
    wide = task_correlation.importance_matrix(_importance())
    vectors = {t: wide[t].to_numpy() for t in wide.columns}
    table = task_correlation.task_correlations(wide, None, seed=0)
    pairs = table[table["kind"] == "tasks"]
    assert list(zip(pairs["task_a"], pairs["task_b"], pairs["method"], strict=True)) == [
        ("a", "b", "pearson"), ("a", "b", "spearman"), ("a", "c", "pearson"),
        ("a", "c", "spearman"), ("b", "c", "pearson"), ("b", "c", "spearman")]
    r_ab = pairs.iloc[0]
    assert r_ab["r"] == pytest.approx(np.corrcoef(vectors["a"], vectors["b"])[0, 1])
    assert r_ab["low"] < r_ab["r"] < r_ab["high"] and r_ab["heads"] == 16
    assert pairs.iloc[1]["r"] == pytest.approx(stats.spearmanr(vectors["a"], vectors["b"])[0])
    # the floor: each task against its own heads permuted; its interval holds 0
    floor = table[table["kind"] == "floor"]
    assert len(floor) == 2 * 3 and (floor["low"] < 0).all() and (floor["high"] > 0).all()
    # one seed: the ceiling rows say why they are empty
    ceiling = table[table["kind"] == "ceiling"]
    assert ceiling["r"].isna().all() and (ceiling["reason"] == task_correlation.NO_CEILING).all()
    # another seed's run of the same tasks: a ceiling per task (a's twin is a, slightly moved)
    twin = wide + 0.01 * np.random.default_rng(5).random(wide.shape)
    ceiling = task_correlation.task_correlations(wide, twin, seed=0).query("kind == 'ceiling'")
    assert (ceiling["r"] > 0.99).all() and (ceiling["reason"] == "").all()


def test_cross_task_findings_are_comparisons_with_intervals_over_heads():
    """Fig. 5's statement is judged by comparisons only: a similar pair's r above 0 says
    nothing (two fine-tunings of one start correlate whatever their labels), so no finding
    judges it alone."""
    wide = task_correlation.importance_matrix(_importance())
    claims = task_correlation.cross_task_claims(wide, [["a", "b"]], [["c", "a"]])
    assert [(c["claim"], c["task"]) for c in claims] == [
        ("similar tasks correlate more than dissimilar ones (pearson)", None),
        ("similar tasks correlate more than dissimilar ones (spearman)", None)]
    assert [c["verdict"] for c in claims] == ["holds"] * 2
    # the comparison by one point (verdicts.ONE_POINT)
    assert all(c["kind"] == "finding" and c["n"] == 16 for c in claims)
    assert [c["bar"] for c in claims] == [0.01] * 2
    table = task_correlation.task_correlations(wide, None, seed=0).set_index(
        ["task_a", "task_b", "method"])
    assert claims[0]["value"] == pytest.approx(
        table.loc[("a", "b", "pearson"), "r"] - table.loc[("a", "c", "pearson"), "r"])
    # swap the roles: the comparison fails
    flipped = task_correlation.cross_task_claims(wide, [["a", "c"]], [["b", "a"]])
    assert [c["verdict"] for c in flipped] == ["does not hold"] * 2
    with pytest.raises(ValueError, match="'a' and 'x'"):
        task_correlation.cross_task_claims(wide, [["a", "x"]], [])


def test_the_similar_gap_is_paired_over_the_same_head_resamples():
    # a and b share most of their variation, as a and c do: the two r move together over
    # resamples of the heads, so the paired interval of their difference is narrower than
    # the two intervals combined as if independent
    rng = np.random.default_rng(2)
    base = rng.random(40)
    wide = pd.DataFrame({"a": base, "b": base + 0.3 * rng.random(40),
                         "c": base + 0.35 * rng.random(40)})
    gap = task_correlation.cross_task_claims(wide, [["a", "b"]], [["a", "c"]])[0]
    ab, ac = (task_correlation.pair_interval(wide[["a", t]].to_numpy(), "pearson")
              for t in "bc")
    assert gap["value"] == pytest.approx(ab.estimate - ac.estimate)
    assert gap["high"] - gap["low"] < np.hypot(ab.high - ab.low, ac.high - ac.low)


def test_similar_pairs_are_compared_with_a_shuffled_label_task_paired_over_heads():
    # a and b share their important heads; s (fine-tuned on shuffled labels) does not: the
    # pair beats its floor. Where s shares the heads as well (the pre-trained start alone
    # decides which heads matter), r(a, s) is as high as r(a, b) and the finding fails.
    wide = task_correlation.importance_matrix(_importance())
    rng = np.random.default_rng(3)
    floor = wide.assign(s=rng.random(len(wide)))
    table = task_correlation.task_correlations(floor, None, seed=0, shuffled=["s"])
    pairs = table[table["method"] == "pearson"].set_index(["task_a", "task_b"])["kind"]
    assert pairs[("a", "b")] == "tasks" and pairs[("a", "s")] == pairs[("b", "s")] == "shuffled"
    claims = task_correlation.cross_task_claims(floor, [["a", "b"]], [], shuffled=["s"])
    shuffled = [c for c in claims if "shuffled-label" in c["claim"]]
    assert [(c["claim"], c["task"]) for c in shuffled] == [
        ("similar tasks correlate more than with a shuffled-label task (pearson)",
         "a–b against s"),
        ("similar tasks correlate more than with a shuffled-label task (spearman)",
         "a–b against s")]
    r = table.set_index(["task_a", "task_b", "method"])["r"]
    assert shuffled[0]["value"] == pytest.approx(
        r[("a", "b", "pearson")] - max(r[("a", "s", "pearson")], r[("b", "s", "pearson")]))
    assert [c["verdict"] for c in shuffled] == ["holds"] * 2
    assert all(c["bar"] == 0.01 and c["n"] == 16 for c in shuffled)
    # s a near copy of a: it correlates with a more than b does
    copy_of_a = wide.assign(s=wide["a"] + 0.001 * rng.random(len(wide)))
    claims = task_correlation.cross_task_claims(copy_of_a, [["a", "b"]], [], shuffled=["s"])
    assert [c["verdict"] for c in claims if "shuffled-label" in c["claim"]] == [
        "does not hold"] * 2


@pytest.mark.parametrize(("model", "sources", "reason"), [
    ({"source": "pretrained", "pretrain": {"epochs": 0}}, ["hub", "local"], None),
    # a shared masked-LM start makes the heads correspond; real tasks share language
    ({"source": "scratch", "pretrain": {"epochs": 2}}, ["hub", "hub"], None),
    ({"source": "scratch", "pretrain": {"epochs": 0}}, ["hub", "hub"], "own random weights"),
    ({"source": "scratch", "pretrain": {"epochs": 2}}, ["synthetic", "hub"],
     "synthetic tasks (a) share no words"),
])
def test_cross_task_claims_are_not_testable_where_heads_do_not_correspond(model, sources, reason):
    why = task_correlation.why_not_comparable(
        model, {task: {"source": s} for task, s in zip("ab", sources, strict=True)})
    if reason is None:
        assert why is None
    else:
        assert reason in why.reason


def test_task_correlation_stage_writes_the_pairs_claims_and_figure(tmp_path):
    paths = []
    for task, table in _importance().groupby("task"):
        paths.append(str(tmp_path / f"{task}.parquet"))
        table.to_parquet(paths[-1])
    out = {"table": str(tmp_path / "table.parquet"), "claims": str(tmp_path / "claims.parquet"),
           "figure": str(tmp_path / "figure.png")}
    # hub tasks fine-tuned from one pre-trained model: head h means the same in every model
    settings = {"heads": {"similar_pairs": [["a", "b"]], "dissimilar_pairs": [["a", "c"]]},
                "model": {"source": "pretrained", "pretrain": {"epochs": 0}},
                "tasks": {t: {"source": "hub"} for t in "abc"}, "seed": 0}
    inputs = {"importance": paths, "ceiling": [],
              "finetune_metrics": [learned_metrics(tmp_path, task) for task in "abc"]}
    task_correlation_stage.run(Job(rule="task_correlation", inputs=inputs, outputs=out,
                                   settings=settings))
    # 3 pairs, 3 floors and 3 ceilings, each Pearson and Spearman
    assert len(pd.read_parquet(out["table"])) == 3 * 3 * 2
    assert pd.read_parquet(out["claims"])["verdict"].tolist() == ["holds"] * 2
    # one task's model at chance: what its heads learned cannot be compared
    at_chance = {**inputs, "finetune_metrics": [
        *inputs["finetune_metrics"][:2],
        learned_metrics(tmp_path / "chance", "c", accuracy=0.5, n=100, chance=0.5)]}
    task_correlation_stage.run(Job(rule="task_correlation", inputs=at_chance, outputs=out,
                                   settings=settings))
    claims = pd.read_parquet(out["claims"])
    assert claims["verdict"].tolist() == ["not testable"] * 2
    assert claims["reason"].str.startswith("c: the model did not learn its task").all()
    # c fine-tuned on shuffled labels instead: at chance by design, it is the floor of the
    # comparisons, out of the pairs, and the findings stand (their pairs' models learned)
    shuffled = {**settings, "heads": {"similar_pairs": [["a", "b"]], "dissimilar_pairs": []},
                "tasks": {**settings["tasks"], "c": {"source": "hub", "shuffle_labels": True}}}
    task_correlation_stage.run(Job(rule="task_correlation", inputs=at_chance, outputs=out,
                                   settings=shuffled))
    claims = pd.read_parquet(out["claims"])
    assert claims["task"].fillna("").tolist() == ["a–b against c", ""] * 2
    # (similar against dissimilar needs a dissimilar pair)
    assert claims["verdict"].tolist() == ["holds", "not testable"] * 2
    kinds = pd.read_parquet(out["table"]).query("method == 'pearson'")["kind"]
    assert kinds.value_counts().to_dict() == {"shuffled": 2, "tasks": 1, "floor": 3,
                                              "ceiling": 3}
    # the default's setting: synthetic tasks, each model from its own random start
    untestable = {**settings, "model": {"source": "scratch", "pretrain": {"epochs": 0}},
                  "tasks": {t: {"source": "synthetic"} for t in "abc"}}
    task_correlation_stage.run(Job(rule="task_correlation", inputs=inputs, outputs=out,
                                   settings=untestable))
    claims = pd.read_parquet(out["claims"])
    assert claims["verdict"].tolist() == ["not testable"] * 2
    # r is still reported in the table, beside the reason the claims give
    assert pd.read_parquet(out["table"])["r"].notna().sum() == 3 * 2 * 2
    assert all("model.pretrain.epochs 0" in r and "synthetic tasks (a, b, c)" in r
               for r in claims["reason"])
    assert (tmp_path / "figure.png").stat().st_size > 0
    only_taylor = _importance().assign(method="taylor")
    only_taylor.to_parquet(paths[0])
    with pytest.raises(ConfigError, match="task_correlation needs 'attribution' in heads.methods"):
        task_correlation_stage.run(Job(rule="task_correlation",
                                       inputs={"importance": paths[:1], "ceiling": []},
                                       outputs=out, settings=settings))


def test_unknown_importance_method_fails_config_validation(tmp_path):
    config = copy.deepcopy(default_config())
    config["heads"]["methods"] = ["attribution", "gradient"]
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    expected = ("config error at heads.methods.1: 'gradient' is not one of ['attribution', "
                "'attention', 'taylor', 'attribution_patching', 'accuracy_difference', "
                "'random']")
    assert expected in result.stdout + result.stderr


def test_pair_naming_an_unknown_task_fails_the_dry_run(tmp_path):
    config = copy.deepcopy(default_config())
    config["heads"]["similar_pairs"] = [["syn_mnli", "mnli"]]
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    assert "pair ['syn_mnli', 'mnli'] names a task that is not in tasks" in (
        result.stdout + result.stderr)
