"""The values the identifiability and explanation stages write, on a tiny random BERT whose
answers are known by hand: rules effective_attention, token_identifiability, token_mixing,
attention_permutation and adversarial_attention, each run once as its job (seconds in all).

The model (hidden 32, 4 heads: d_v = 8) has its layer 0's queries zeroed, so that layer's
attention is uniform over the real tokens whatever the keys: permuting it or replacing its
keys changes nothing. Two dev examples are cut to 7 tokens (<= d_v), the others have 14-18."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import DEFAULT_CONFIG, PAIR_TASK, learned_metrics
from test_dumps import MODEL_CFG, tiny_task_model
from transformers import BertForSequenceClassification

from attnlab.model_job import ModelJob
from attnlab.stages import (
    adversarial_attention,
    attention_permutation,
    effective_attention,
    token_identifiability,
    token_mixing,
)

D_V, LAYERS, HEADS = 8, 2, 4
SHORT = [0, 1]  # dev examples cut to two words a sentence: [CLS] 2 [SEP] 2 [SEP], 7 tokens
IDENTIFIABILITY, EXPLANATION = DEFAULT_CONFIG["identifiability"], DEFAULT_CONFIG["explanation"]
SETTINGS = {
    "identifiability": {
        **IDENTIFIABILITY,
        "token_mixing": {**IDENTIFIABILITY["token_mixing"], "examples": 3},
        "token_identifiability": {**IDENTIFIABILITY["token_identifiability"],
                                  "train_examples": 40, "eval_examples": 8, "epochs": 2}},
    "explanation": {
        **EXPLANATION,
        "attention_permutation": {"examples": 8, "permutations": 2},
        "adversarial_keys": {**EXPLANATION["adversarial_keys"], "train_examples": 40,
                             "epochs": 1, "examples": 8},
        "adversarial_attention": {**EXPLANATION["adversarial_attention"], "examples": 3,
                                  "steps": 10}},
}
OUTPUTS = {
    effective_attention: ("heads", "tokens", "claims"),
    token_identifiability: ("sentences", "rates", "claims"),
    token_mixing: ("tokens", "offsets", "claims"),
    attention_permutation: ("table", "ranking", "claims"),
    adversarial_attention: ("key_table", "attention_table", "claims"),
}


def uniform_first_layer(model_dir: Path) -> None:
    """Zero layer 0's query projection (weights and bias): every score is 0, the attention
    uniform over the unmasked keys."""
    model = BertForSequenceClassification.from_pretrained(model_dir)
    query = model.bert.encoder.layer[0].attention.self.query
    with torch.no_grad():
        query.weight.zero_()
        query.bias.zero_()
    model.save_pretrained(model_dir)


@pytest.fixture(scope="module")
def stages(tmp_path_factory) -> tuple[pd.DataFrame, dict[str, dict[str, pd.DataFrame]]]:
    """The dev split and every stage's tables, by stage name and output name."""
    folder = tmp_path_factory.mktemp("stage_values")
    task, model_dir, dev_path = tiny_task_model(
        folder, {**PAIR_TASK, "synthetic": dict(PAIR_TASK["synthetic"])}, n_dev=8,
        layers=LAYERS)
    uniform_first_layer(model_dir)
    dev = pd.read_parquet(dev_path)
    for column in ("premise", "hypothesis"):
        dev.loc[SHORT, column] = dev.loc[SHORT, column].str.split().str[:2].str.join(" ")
    dev.to_parquet(dev_path)
    config = {**DEFAULT_CONFIG, **SETTINGS, "device": "cpu", "tasks": {"syn_mnli": task},
              "model": MODEL_CFG}
    inputs = {"model": model_dir, "dev": dev_path, "train": folder / "train.parquet",
              "finetune_metrics": learned_metrics(folder)}
    tables = {}
    for stage, names in OUTPUTS.items():
        rule = stage.__name__.rsplit(".", 1)[1]
        outputs = {name: folder / f"{rule}_{name}.parquet" for name in names}
        stage.run(ModelJob.from_config(rule, config, task="syn_mnli", inputs=inputs,
                                       outputs={**outputs, "figure": folder / f"{rule}.png"}))
        tables[rule] = {name: pd.read_parquet(path) for name, path in outputs.items()}
    return dev, tables


def lengths(dev: pd.DataFrame) -> np.ndarray:
    """Tokens of each dev example, counted by hand: its words, [CLS] and two [SEP]."""
    return (dev["premise"].str.split().str.len() + dev["hypothesis"].str.split().str.len()
            + 3).to_numpy()


def verdict(claims: pd.DataFrame, start: str) -> str:
    (found,) = claims.loc[claims["claim"].str.startswith(start), "verdict"]
    return found


def test_effective_attention_is_the_attention_up_to_d_v_tokens_and_differs_beyond(stages):
    dev, tables = stages
    heads = tables["effective_attention"]["heads"]
    assert len(heads) == len(dev) * LAYERS * HEADS and set(heads["d_v"]) == {D_V}
    n = lengths(dev)[heads["example"]]
    assert (heads["length"] == n).all()
    # rank T = min(n, d_v) for random values: the left null space has n - d_v dimensions
    assert (heads["null_dim"] == np.maximum(n - D_V, 0)).all()
    short, long = heads[n <= D_V], heads[n > D_V]
    assert set(short["example"]) == set(SHORT)
    # up to d_v tokens A_eff = A (to float64 rounding of the projection); beyond, some of A
    # lies in the null space (measured 0.1-0.7 of its norm)
    assert (short["relative_change"] <= 1e-6).all()
    assert (long["relative_change"] > 1e-3).all()
    claims = tables["effective_attention"]["claims"]
    assert verdict(claims, "attention is identifiable up to d_v tokens (A_eff = A)") == "holds"
    assert verdict(claims, "beyond d_v tokens attention weights are not identifiable") == "holds"
    # the rank argument is checked, the paper's observations are findings over the longer
    # examples, with their interval and source
    assert (claims["kind"] == "check").sum() == 5
    findings = claims[claims["kind"] == "finding"]
    assert (findings["n"] == len(dev) - len(SHORT)).all()
    assert (findings["low"] <= findings["value"]).all() and (findings["source"] != "").all()


def test_token_identifiability_at_layer_0_is_exact_for_the_identity_map(stages):
    dev, tables = stages
    rates = tables["token_identifiability"]["rates"]
    # layers 0..2, three maps (identity, linear, MLP), two losses
    assert len(rates) == (LAYERS + 1) * 3 * 2
    # scored on every token of the 8 dev examples
    assert set(rates["tokens"]) == {lengths(dev).sum()}
    # layer 0 is the input embedding itself: the identity finds every token
    identity = rates[(rates["layer"] == 0) & (rates["map"] == "identity")]
    assert len(identity) == 2 and (identity["rate"] == 1).all()


def test_token_mixing_shares_sum_to_one_per_token_and_count_pairs_by_offset(stages):
    dev, tables = stages
    tokens, offsets = tables["token_mixing"]["tokens"], tables["token_mixing"]["offsets"]
    n = lengths(dev.iloc[:3])
    assert (tokens["top_is_self"] == (tokens["top_contributor"] == tokens["token"])).all()
    assert set(tokens["estimator"]) == {"exact"}  # 14-18 tokens, within exact_max_tokens
    for layer, rows in offsets.groupby("layer"):
        # (token, input) pairs at each offset: n - |offset| in an example of n tokens
        expected = {k: int(np.maximum(n - abs(k), 0).sum()) for k in range(-n.max() + 1,
                                                                            n.max())}
        assert dict(zip(rows["offset"], rows["pairs"], strict=True)) == expected
        # each token's contributions are shares of it that sum to 1: over all pairs, the
        # contributions add up to the number of tokens
        total = (rows["mean_contribution"] * rows["pairs"]).sum()
        assert total == pytest.approx(n.sum(), rel=1e-6), layer
        # the mean at offset 0 is the mean self-contribution
        own = tokens.loc[tokens["layer"] == layer, "self_contribution"].mean()
        assert rows.loc[rows["offset"] == 0, "mean_contribution"].item() == pytest.approx(own)


def test_permuting_uniform_attention_changes_nothing_and_the_other_layer_something(stages):
    _, tables = stages
    table = tables["attention_permutation"]["table"]
    by_setting = {str(k): rows for k, rows in table.groupby(table["permuted"].astype(str))}
    # layer 0's attention is uniform: any permutation of it is itself (float32 rounding of the
    # permuted sums); layer 1's is not
    assert (by_setting["0"]["tvd_median"] <= 1e-6).all()
    assert (by_setting["0"]["correct_share"] == by_setting["0"]["original_correct"]).all()
    assert (by_setting["1"]["tvd_median"] > 1e-5).all()
    claims = tables["attention_permutation"]["claims"]
    costs = claims.set_index("claim")["value"]
    assert costs.iloc[0] == pytest.approx(0, abs=1e-12)  # layer 0's permutation costs nothing
    # on any example: every resample gives 0, an interval of no width, which is not judged
    assert claims["verdict"].iloc[0] == "not testable"
    assert claims["reason"].iloc[0].endswith(": no interval")


def test_attention_ranking_covers_each_examples_words(stages):
    dev, tables = stages
    ranking = tables["attention_permutation"]["ranking"]
    # every word of each example is ranked: its tokens less [CLS] and the two [SEP]
    assert list(ranking["tokens"]) == list(lengths(dev) - 3)
    taus = ranking[["tau_gradient", "tau_loo", "tau_gradient_loo"]]
    assert taus.stack().between(-1, 1).all()
    claims = tables["attention_permutation"]["claims"]
    ranked = claims[claims["source"].str.startswith("Jain & Wallace 2019")]
    # each over the examples whose tau is defined (a constant score has none)
    assert list(ranked["n"]) == [
        taus["tau_gradient"].notna().sum(), taus["tau_loo"].notna().sum(),
        *(taus[["tau_gradient_loo", attention]].notna().all(axis=1).sum()
          for attention in ("tau_loo", "tau_gradient"))]


def test_adversarial_keys_cannot_move_uniform_attention_and_attention_keeps_its_bound(stages):
    _, tables = stages
    keys = tables["adversarial_attention"]["key_table"]
    assert len(keys) == 8 * LAYERS
    # layer 0's queries are zero: its attention is uniform whatever the keys; layer 1's moves
    assert (keys.loc[keys["layer"] == 0, "jsd"] <= 1e-6).all()
    assert (keys.loc[keys["layer"] == 1, "jsd"] > 1e-6).all()
    # the prediction is the one with adversarial keys in every layer: one per example
    assert (keys.groupby("example")["same_prediction"].nunique() == 1).all()
    attention = tables["adversarial_attention"]["attention_table"]
    assert len(attention) == 3 * LAYERS
    # the search keeps the output within TVD epsilon of the original where it found a
    # feasible attention, and the JSD of two distributions is at most ln 2 nats
    epsilon = EXPLANATION["adversarial_attention"]["epsilon"]
    feasible = attention[attention["feasible_steps"] > 0]
    assert len(feasible) and (feasible["tvd"] <= epsilon).all()
    assert (attention["jsd"] <= np.log(2)).all()
