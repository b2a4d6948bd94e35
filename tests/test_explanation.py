"""Is attention explanation? Permutations move only the weights they may move and change
nothing where attention is uniform; adversarial attention keeps the output within its TVD bound
on every example; the key adversary's distance and JSD are what they say, reproducibly; bad
input fails in one line before any work."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import DEFAULT_CONFIG, learned_metrics
from test_config import default_config, dry_run
from tiny_models import FAMILIES, LENGTHS, tiny_batch, tiny_classifier, without_labels

from attnlab.analyses import adversarial_attention as aa
from attnlab.analyses import attention_permutation as ap
from attnlab.analyses import attention_ranking as ar
from attnlab.analyses import verdicts
from attnlab.analyses.divergences import jensen_shannon, total_variation
from attnlab.engine import models
from attnlab.engine.intervention import Intervention
from attnlab.model_job import ModelJob
from attnlab.stages import (
    adversarial_attention,
    attention_permutation,
    effective_attention,
    token_identifiability,
    token_mixing,
)


def test_permutation_indices_permute_the_movable_keys_only():
    permutable = torch.tensor([[False, True, True, True, False, False],
                               [False, True, True, False, False, False]])
    index = ap.permutation_indices(permutable, 3, torch.Generator().manual_seed(0))
    assert index.shape == (2, 3, 6, 6)
    assert torch.equal(index.sort(dim=-1).values, torch.arange(6).expand(2, 3, 6, 6))
    fixed = ~permutable[:, None, None, :].expand_as(index)
    assert torch.equal(index[fixed], torch.arange(6).expand(2, 3, 6, 6)[fixed])
    moved = index[~fixed] != torch.arange(6).expand(2, 3, 6, 6)[~fixed]
    assert moved.double().mean() > 0.3  # random permutations of 2-3 keys move most of them
    again = ap.permutation_indices(permutable, 3, torch.Generator().manual_seed(0))
    assert torch.equal(index, again)  # seeded


def _uniform_layer(model, layer: int):
    """Zero layer `layer`'s query and key projections: every score is 0, so every head attends
    uniformly to the real tokens."""
    attention = model.bert.encoder.layer[layer].attention.self
    with torch.no_grad():
        for projection in (attention.query, attention.key):
            projection.weight.zero_()
            projection.bias.zero_()
    return model


def test_permuting_a_layer_whose_attention_is_uniform_changes_nothing(tokenizer):
    """Permuting equal weights gives the same output up to rounding (the permuted keys' values
    are summed in another order, which rounds differently on some CPUs: not bit-identical);
    permuting a layer with non-uniform attention does change it (the test is not vacuous)."""
    model = _uniform_layer(models.prepare_model(tiny_classifier("bert", init=0.5)), 1)
    batch = tiny_batch("bert", LENGTHS)
    capture = Intervention(capture=True)
    with torch.no_grad():
        original = torch.softmax(models.logits(model, without_labels(batch), capture).double(), -1)
    real = batch["attention_mask"].bool()
    row = capture.probs[1][0, 0, 0]
    assert torch.allclose(row[real[0]], torch.full((9,), 1 / 9))
    uniform = ap.permuted_probabilities(model, tokenizer, batch, [1], 3, seed=0, batch_size=4)
    # float32 logits: a different summation order moves them by a few ulps (~1e-7 relative)
    torch.testing.assert_close(uniform, original.expand_as(uniform), rtol=0, atol=1e-6)
    other = ap.permuted_probabilities(model, tokenizer, batch, [0], 3, seed=0, batch_size=4)
    assert (other - original).abs().max() > 1e-3


def test_permutation_table_and_its_summary(tokenizer):
    model = models.prepare_model(tiny_classifier("bert", init=0.5))
    batch = tiny_batch("bert", LENGTHS)
    table = ap.permutation_table(model, tokenizer, batch, permutations=4, seed=0, batch_size=4)
    assert list(table["permuted"].unique()) == ["0", "1", "2", ap.ALL_LAYERS]
    assert len(table) == 4 * len(LENGTHS)
    assert table["tvd_median"].between(0, 1).all()
    summary = ap.summary(table).set_index("permuted")
    first = table[table["permuted"] == "0"]
    assert summary.loc["0", "accuracy_change"] == pytest.approx(
        first["correct_share"].mean() - first["original_correct"].mean())
    # a rerun with the same seed gives the same permutations, in batches of another size: the
    # same numbers up to float32 rounding over other padding widths (~1e-6)
    pd.testing.assert_frame_equal(
        table, ap.permutation_table(model, tokenizer, batch, permutations=4, seed=0,
                                    batch_size=3), check_exact=False, atol=1e-5, rtol=0)


def _permuted(drops: dict[str, list[float]]) -> pd.DataFrame:
    """A made-up permutation table: each example right unpermuted, its permuted share of
    correct predictions 1 - drop, per permuted layer."""
    return pd.DataFrame([{"permuted": name, "example": example, "tvd_median": 0.1,
                          "correct_share": 1 - drop, "original_correct": True}
                         for name, per_example in drops.items()
                         for example, drop in enumerate(per_example)])


def test_permutation_findings_follow_the_accuracy_drops_over_examples():
    """Every example loses 3 or 5 % of its permutations in layer 0 and at most 1 % elsewhere:
    both hold on every resample (the poster's "only 6 percent": the first layer's drop lies
    below 0.06). Layer 0 costing two examples of twenty all their permutations: the estimate
    (0.1) is above the bar, but resamples without either example see no drop, so the interval
    reaches 0: inconclusive. A layer costing every example 0.25 or 0.35: fails, the first as
    the others. (Drops alike on every example would give intervals of no width, which are not
    judged.)"""
    n = 20
    poster = ap.claims(_permuted({"0": [0.03, 0.05] * (n // 2), "1": [0.0] * n,
                                  "2": [0.0, 0.01] * (n // 2), "all": [0.2] * n}))
    assert [c["kind"] for c in poster] == ["finding", "finding"]
    assert [c["verdict"] for c in poster] == ["holds", "holds"]
    assert [c["value"] for c in poster] == pytest.approx([0.04, 0.005])
    assert (poster[0]["bar"], poster[0]["side"]) == (pytest.approx(0.06), "below")
    assert "Drozdyuk" in poster[0]["source"]
    two = [1.0, 1.0] + [0.0] * (n - 2)
    thin = ap.claims(_permuted({"0": two, "1": [0.25, 0.35] * (n // 2), "2": [0.0] * n,
                                "all": [0.2] * n}))
    assert thin[0]["value"] == pytest.approx(0.1) and thin[0]["low"] == 0
    assert [c["verdict"] for c in thin] == ["inconclusive", "does not hold"]
    costly = ap.claims(_permuted({"0": [0.25, 0.35] * (n // 2), "1": [0.0, 0.01] * (n // 2),
                                  "all": [0.3] * n}))
    assert [c["verdict"] for c in costly] == ["does not hold", "holds"]


def test_adversarial_findings_and_the_distance_check():
    """The keys' distance is a check (the loss drives it to distance_cap); agreement and JSD
    are findings over the examples, the adversarial attention's median JSD one per layer (JSDs
    that vary over the examples: alike on every one, the intervals would have no width)."""
    keys = pd.DataFrame([{"example": e, "layer": layer, "same_prediction": e != 0,
                          "key_distance": 1.0, "jsd": 0.3 + 0.02 * (e % 2 - 0.5)}
                         for e in range(40) for layer in range(2)])
    attention = pd.DataFrame([{"example": e, "layer": layer,
                               "jsd": (0.05 if layer else 0.3) + 0.02 * (e % 3 - 1)}
                              for e in range(10) for layer in range(2)])
    rows = aa.claims(keys, attention, epsilon=0.01, distance_cap=1.0)
    assert [(r["stage"], r["kind"]) for r in rows] == [
        ("adversarial_keys", "finding"), ("adversarial_keys", "check"),
        ("adversarial_keys", "finding"), ("adversarial_attention", "finding"),
        ("adversarial_attention", "finding")]
    keep, far, different, layer0, layer1 = rows
    # 39 of 40 kept: 0.975, but a resample with two of the changed example falls below 0.95
    assert keep["value"] == pytest.approx(0.975) and keep["verdict"] == "inconclusive"
    assert far["verdict"] == "holds" and "distance_cap = 1.0" in far["metric"]
    assert (different["value"], different["verdict"]) == (pytest.approx(0.3), "holds")
    assert (layer0["verdict"], layer1["verdict"]) == ("holds", "does not hold")
    assert "Jain & Wallace 2019" in layer0["source"]


def test_kendall_tau_of_known_rankings():
    assert ar.kendall(np.array([1, 2, 3, 4]), np.array([10, 20, 30, 40])) == pytest.approx(1)
    assert ar.kendall(np.array([1, 2, 3, 4]), np.array([4, 3, 2, 1])) == pytest.approx(-1)
    # one discordant pair of six: (5 - 1) / 6
    assert ar.kendall(np.array([1, 2, 3, 4]), np.array([1, 2, 4, 3])) == pytest.approx(2 / 3)
    assert np.isnan(ar.kendall(np.array([1.0]), np.array([2.0])))
    assert np.isnan(ar.kendall(np.array([1, 2, 3]), np.array([5, 5, 5])))


def _detached_softmax(*args, **kwargs):
    """Attention probabilities that are constants for autograd: every softmax inside these
    classifiers is an attention's (their heads have none; the output's is torch.softmax)."""
    return SOFTMAX(*args, **kwargs).detach()


SOFTMAX = torch.nn.functional.softmax


def test_attention_gradient_and_leave_one_out_are_what_they_say(tokenizer, monkeypatch):
    """On a float64 BERT: the attention is the last layer's [CLS] row as the model returns it,
    averaged over heads; the gradient score |grad . input| of the word embeddings, as the
    model's own inputs_embeds give it, through the attention and (Jain & Wallace's) with every
    attention probability a constant; leave-one-out the TVD with the token cut out of the
    example alone; and the table is the same in batches of any size."""
    model = models.prepare_model(tiny_classifier("bert", init=0.5, dtype=torch.float64))
    batch = without_labels(tiny_batch("bert", LENGTHS))

    def by_hand():
        words = model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_()
        out = model(inputs_embeds=words, attention_mask=batch["attention_mask"],
                    output_attentions=True)
        probs = torch.softmax(out.logits, -1)
        (grad,) = torch.autograd.grad(probs.max(-1).values.sum(), words)
        return out.attentions[-1][:, :, 0].mean(1).detach(), (grad * words).sum(-1).abs(), probs

    attention, through, probs = ar._attention_and_gradient(model, batch, ar.THROUGH_ATTENTION)
    expected_attention, expected_through, expected = by_hand()
    torch.testing.assert_close(probs, expected.detach())
    torch.testing.assert_close(through, expected_through)
    torch.testing.assert_close(attention, expected_attention)
    detached = ar._attention_and_gradient(model, batch, ar.DETACHED)[1]
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "softmax", _detached_softmax)
        torch.testing.assert_close(detached, by_hand()[1])
    content = ar._content(batch, tokenizer)
    assert content.sum(1).tolist() == [n - 2 for n in LENGTHS]  # [CLS] and [SEP] left out
    loo = ar._leave_one_out(model, batch, content, probs, batch_size=4)
    row, n = 1, LENGTHS[1]
    for index, t in enumerate(range(1, n - 1)):
        alone = {k: torch.cat([v[row:row + 1, :t], v[row:row + 1, t + 1:n]], dim=1)
                 for k, v in batch.items()}
        with torch.no_grad():
            without = torch.softmax(models.logits(model, alone), -1)
        assert loo[row][index] == pytest.approx(
            total_variation(probs[row], without[0]).item(), abs=1e-12)
    table = ar.ranking_table(model, tokenizer, tiny_batch("bert", LENGTHS), batch_size=4)
    assert list(table["tokens"]) == [n - 2 for n in LENGTHS]
    pd.testing.assert_frame_equal(
        table, ar.ranking_table(model, tokenizer, tiny_batch("bert", LENGTHS), batch_size=1),
        check_exact=False, atol=1e-9, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_detached_gradient_holds_every_attention_of_the_model_fixed(family, monkeypatch):
    """Every family: the detached gradient is the through-attention one of the same model with
    every attention probability made a constant (BART's decoder and cross-attention too), and
    on these random models, whose attention is far from uniform, it is another gradient: the
    two differ by most of their norm (0.92 to 0.97 of it at init 0.5; 0.3 leaves room)."""
    model = models.prepare_model(tiny_classifier(family, init=0.5, dtype=torch.float64))
    batch = without_labels(tiny_batch(family, LENGTHS))
    detached = ar._attention_and_gradient(model, batch, ar.DETACHED)[1]
    through = ar._attention_and_gradient(model, batch, ar.THROUGH_ATTENTION)[1]
    with monkeypatch.context() as patch:
        patch.setattr(torch.nn.functional, "softmax", _detached_softmax)
        constant = ar._attention_and_gradient(model, batch, ar.THROUGH_ATTENTION)[1]
    torch.testing.assert_close(detached, constant, rtol=1e-12, atol=1e-12)
    real = batch["attention_mask"].bool()
    assert (detached - through)[real].norm() > 0.3 * through[real].norm()


def _taus(gradient_loo: np.ndarray, *, n: int = 30, seed: int = 0) -> pd.DataFrame:
    """A made-up ranking table of n examples (and two whose tau is undefined): attention's tau
    with either importance uniform on [-0.3, 0.3], the importances' with each other given."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"example": range(n + 2), "tokens": 5,
                         "tau_gradient": [*rng.uniform(-0.3, 0.3, n), np.nan, np.nan],
                         "tau_loo": [*rng.uniform(-0.3, 0.3, n), np.nan, np.nan],
                         "tau_gradient_loo": [*gradient_loo, np.nan, 0.1]})


def test_ranking_findings_leave_out_examples_without_a_ranking():
    """tau near 0 on 30 examples: attention ranks unlike both importances (holds below 0.5);
    gradient and leave-one-out agree more than attention and either (paired, 0.4 against
    about 0): both hold. Examples whose tau is undefined are left out of n; none defined: not
    testable."""
    table = _taus(np.random.default_rng(1).uniform(0.2, 0.6, 30))
    rows = ar.claims(table, gradient=ar.DETACHED)
    assert [r["verdict"] for r in rows] == ["holds"] * 4
    assert [r["n"] for r in rows] == [30] * 4
    assert rows[0]["bar"] == ar.WEAK_TAU and rows[0]["side"] == "below"
    for row, attention in zip(rows[2:], ["tau_loo", "tau_gradient"], strict=True):
        assert row["value"] == pytest.approx(
            (table["tau_gradient_loo"] - table[attention]).dropna().mean())
        assert row["bar"] == verdicts.ONE_POINT and row["side"] == "above"
    assert all("Jain & Wallace 2019, " in r["source"] for r in rows)
    assert "attention detached" in rows[0]["metric"]
    assert "through the attention" in ar.claims(table, gradient=ar.THROUGH_ATTENTION)[0]["metric"]
    undefined = ar.claims(table.assign(tau_gradient=np.nan), gradient=ar.DETACHED)
    assert [r["verdict"] for r in undefined] == ["not testable", "holds", "holds",
                                                 "not testable"]


def test_attention_ranks_unlike_the_importances_only_where_they_agree_more():
    """The comparison, not the threshold: with the importances' tau with each other as low as
    attention's (the same uniform draws on [-0.3, 0.3]), tau below 0.5 still holds, but the
    paired comparisons do not (their intervals lie about 0, around the one-point bar); with
    the importances agreeing less than attention does (tau 0.5 below), they do not hold."""
    rng = np.random.default_rng(2)
    alike = ar.claims(_taus(rng.uniform(-0.3, 0.3, 30)), gradient=ar.DETACHED)
    assert [r["verdict"] for r in alike[:2]] == ["holds"] * 2
    assert [r["verdict"] for r in alike[2:]] == ["inconclusive"] * 2
    less = ar.claims(_taus(rng.uniform(-0.8, -0.5, 30)), gradient=ar.DETACHED)
    assert [r["verdict"] for r in less[2:]] == ["does not hold"] * 2


def test_divergences():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    assert total_variation(p, q).tolist() == [0.0, 1.0]
    assert torch.allclose(jensen_shannon(p, q), torch.tensor([0.0, math.log(2)],
                                                             dtype=torch.float64))


def test_adversarial_attention_respects_its_tvd_bound_on_every_example():
    """The kept attention is checked against the bound in the search itself; here each example
    is re-run alone, without its batch's padding. ε + 1e-6: a forward pass of another shape
    moves the float32 logits by ~1e-7. The optimiser does leave the bound (some steps are
    infeasible) and still finds attention far from the original (the test is not vacuous)."""
    model = models.prepare_model(tiny_classifier("bert", init=0.5))
    model.requires_grad_(False)
    batch = without_labels(tiny_batch("bert", LENGTHS))
    cfg = {"epsilon": 0.01, "steps": 30, "learning_rate": 0.1, "penalty": 100.0,
           "init_noise": 1.0}
    layer = 1
    noise = torch.randn(len(LENGTHS), 4, 9, 9, generator=torch.Generator().manual_seed(0))
    attention, best, feasible = aa.search_attention(model, batch, layer, cfg, noise)
    assert (feasible < cfg["steps"]).any()
    for row, n in enumerate(LENGTHS):
        alone = {k: v[row:row + 1, :n] for k, v in batch.items()}
        with torch.no_grad():
            original = torch.softmax(models.logits(model, alone).double(), -1)
            attacked = torch.softmax(models.logits(
                model, alone, Intervention(replace={layer: best[row:row + 1, :, :n, :n]})
            ).double(), -1)
        assert total_variation(original, attacked).item() <= cfg["epsilon"] + 1e-6
    jsd = aa.attention_jsd(attention, best, batch["attention_mask"].bool())
    assert jsd.max() > 0.05
    table = aa.adversarial_attention(model, tiny_batch("bert", LENGTHS), layer, cfg, 4, seed=0)
    assert (table["tvd"] <= cfg["epsilon"]).all()
    assert list(table["example"]) == list(range(len(LENGTHS)))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_search_s_passes_start_at_the_attacked_layer_and_equal_whole_ones(family):
    """A search step's output with a layer's attention replaced, run from the hidden states
    entering that layer, is the whole model's with the same replacement, in value and in the
    gradient the search follows (float64, padded batch: to 1e-12); the layers below run once,
    not once per step (a family that cannot be run from a hidden state, BART's classifier,
    runs whole)."""
    model = models.prepare_model(tiny_classifier(family, init=0.5, dtype=torch.float64))
    model.requires_grad_(False)
    batch = without_labels(tiny_batch(family, (9, 6, 8)))
    layer, steps = 1, 3
    capture = Intervention(capture=True)
    with torch.no_grad():
        models.logits(model, batch, capture)
    attention = capture.probs[layer]
    calls = []
    hooks = [block.register_forward_hook(lambda *_, i=i: calls.append(i))
             for i, block in enumerate(models.layer_stack(model))]
    output = aa._outputs(model, batch, layer)
    n_layers = models.num_layers(model)
    def whole(candidate: torch.Tensor) -> torch.Tensor:
        logits = models.logits(model, batch, Intervention(replace={layer: candidate}))
        return torch.softmax(logits.double(), dim=-1)

    for step in range(steps):
        results = []
        for run in (output, whole):
            scores = (attention.clamp_min(1e-9).log() * (1 + 0.3 * step)).requires_grad_()
            probs = run(torch.softmax(scores, dim=-1) * (attention > 0))
            probs[:, 0].sum().backward()
            results.append((probs.detach(), scores.grad))
        (got, got_grad), (want, want_grad) = results
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        torch.testing.assert_close(got_grad, want_grad, rtol=0, atol=1e-12)
        assert want_grad.abs().max() > 1e-6  # the gradient compared is not all zeros
    for hook in hooks:
        hook.remove()
    # per step: the search's pass (from the layer, or whole) and the whole model's pass here
    below = layer if models.family_of(model).split else steps * layer
    assert calls.count(0) == below + steps
    assert calls.count(n_layers - 1) == 2 * steps


def test_each_example_gets_its_own_search_and_key_rows_whatever_its_batch():
    """The loops run their batches shortest first and put the rows back in the examples' order:
    in batches of 4 (lengths 5-8, then 9 and 9) each example's row is the one it gets alone, in
    float64 to 1e-9 (another batch width changes only the float path)."""
    model = models.prepare_model(tiny_classifier("bert", init=0.5, dtype=torch.float64))
    model.requires_grad_(False)
    inputs = tiny_batch("bert", LENGTHS)
    cfg = {"epsilon": 0.01, "steps": 10, "learning_rate": 0.1, "penalty": 100.0,
           "init_noise": 1.0}
    searched = [aa.adversarial_attention(model, inputs, 1, cfg, size, seed=0) for size in (4, 1)]
    pd.testing.assert_frame_equal(*searched, check_exact=False, atol=1e-9, rtol=0)
    assert searched[0]["jsd"].gt(0).sum() >= 3  # rows that tell the examples apart
    adversary = aa.KeyAdversary(model.config.hidden_size, 16).double()
    keys = [aa.evaluate_key_adversary(model, adversary, inputs, size) for size in (4, 1)]
    pd.testing.assert_frame_equal(*keys, check_exact=False, atol=1e-9, rtol=0)


def test_key_distance_and_attention_jsd_measure_what_they_say():
    model = models.prepare_model(tiny_classifier("bert"))
    batch = without_labels(tiny_batch("bert", LENGTHS))
    doubled = Intervention(capture=True, key_map=lambda layer, key: 2 * key)
    plain = Intervention(capture=True)
    with torch.no_grad():
        models.logits(model, batch, doubled)
        models.logits(model, batch, plain)
    real = batch["attention_mask"].bool()
    # ‖2K − K‖ / ‖K‖ = 1 in every layer
    distance = aa.key_distances(doubled.keys, real)
    assert torch.allclose(distance, torch.ones_like(distance), atol=1e-6)
    assert torch.equal(aa.attention_jsd(plain.probs[0], plain.probs[0], real),
                       torch.zeros(len(LENGTHS), dtype=torch.float64))
    assert (aa.attention_jsd(plain.probs[0], doubled.probs[0], real) > 0).all()


def test_key_adversary_is_reproducible_and_reports_every_example_and_layer():
    model = models.prepare_model(tiny_classifier("bert", init=0.5))
    train, dev = tiny_batch("bert", LENGTHS, seed=1), tiny_batch("bert", LENGTHS)
    cfg = {"epochs": 2, "hidden": 16, "alpha": 0.5, "distance_cap": 1.0, "learning_rate": 1e-2}
    tables = [aa.evaluate_key_adversary(model, aa.train_key_adversary(model, train, cfg, 4, 0),
                                        dev, 4) for _ in range(2)]
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert len(tables[0]) == len(LENGTHS) * 3
    assert tables[0]["key_distance"].gt(0).all() and tables[0]["jsd"].ge(0).all()


def _job(rule: str, model_dir, missing, outputs, config=DEFAULT_CONFIG) -> ModelJob:
    """A job of `rule` on the CPU, on the model in `model_dir`, whose splits are the (missing)
    file `missing`."""
    return ModelJob.from_config(rule, {**config, "device": "cpu"}, task="syn_mnli",
                                inputs={"model": model_dir, "train": missing, "dev": missing,
                                        "finetune_metrics": learned_metrics(model_dir.parent)},
                                outputs=outputs)


def test_adversarial_layer_out_of_range_fails_in_one_line_before_any_work(tmp_path, tokenizer):
    """The layers are checked right after the model is loaded: the data paths do not exist,
    so any further work would fail differently; nothing is written."""
    model_dir = tmp_path / "model"
    models.prepare_model(tiny_classifier("bert")).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["explanation"]["adversarial_attention"]["layers"] = [0, 3]
    out = {k: tmp_path / f"{k}.out" for k in ("key_table", "attention_table", "claims",
                                               "figure")}
    with pytest.raises(ValueError) as error:
        adversarial_attention.run(_job("adversarial_attention", model_dir,
                                       tmp_path / "missing.parquet", out, config))
    assert str(error.value) == ("explanation.adversarial_attention.layers: layer 3 is out of "
                                "range; the model has 3 layers (0..2)")
    assert not any(path.exists() for path in out.values())


STAGES = {stage.__name__.rsplit(".", 1)[-1]: stage.run
          for stage in (effective_attention, token_identifiability, token_mixing,
                        attention_permutation, adversarial_attention)}


@pytest.fixture(scope="module")
def deberta_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("deberta")
    tiny_classifier("deberta-v2").save_pretrained(path)
    return path


@pytest.mark.parametrize("rule", STAGES)
def test_unsupported_family_fails_in_one_line_before_any_work(rule, deberta_dir, tmp_path):
    """Every stage loads the model first; an unsupported family is refused there, before the
    (here missing) data would be read."""
    with pytest.raises(models.UnsupportedModelError) as error:
        STAGES[rule](_job(rule, deberta_dir, tmp_path / "missing.parquet", {}))
    assert "\n" not in str(error.value) and "deberta-v2" in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_adversarial_layer_beyond_the_scratch_model_fails_the_dry_run(tmp_path):
    config = copy.deepcopy(default_config())
    config.setdefault("explanation", {})["adversarial_attention"] = {"layers": [0, 4]}
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    assert ("config error at explanation.adversarial_attention.layers: layer 4 is out of range; "
            "the model has 4 layers (0..3)") in result.stdout + result.stderr
