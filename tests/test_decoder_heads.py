"""Head importance and pruning (Hao et al. 2021 §4) of a decoder on next-token accuracy: the
tiny Llama of config/induction.yaml, trained on the planted induction task (about 5 s), whose
next token needs two heads, a previous-token head in layer 0 and an induction head in layer 1
(Olsson et al. 2022). Module cost: about 15 s on a free machine."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import gate_central_difference, learned_metrics
from test_induction import SPEC, _trained

from attnlab.analyses import heads, pruning
from attnlab.data import induction
from attnlab.data.dumps import write_dump
from attnlab.engine import attribution, examples, models, next_token
from attnlab.model_job import ModelJob
from attnlab.plumbing.config import validate_config
from attnlab.stages import head_importance, prune_eval

N_DEV = 200
PERCENTS = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]


@pytest.fixture(scope="module")
def decoder():
    """The trained decoder, its first N_DEV held-out prompts (right-padded, labels = target
    tokens), the engine's attention probabilities of them and their per-head maxima as the
    attribution dumps hold them (over each example's real tokens)."""
    trained = _trained(seed=0)
    model = models.prepare_model(trained.model)
    dev = induction.generate(N_DEV, seed=1)
    inputs = next_token.prompt_inputs(
        next_token.encode_prompts(dev, SPEC, trained.tokenizer, max_length=32))
    # a fixed rule of 20 nodes, as tests/test_induction.py: the ranking, not the last digit
    result = attribution.attribute(model, inputs, target=inputs["labels"],
                                   quadrature="riemann_right", steps=20)
    lengths = inputs["attention_mask"].sum(dim=1).tolist()
    dump = {name: np.stack([
        values[i, :, :, :n, :n].flatten(2).amax(dim=-1).double().numpy()
        for i, n in enumerate(lengths)]) for name, values in
        (("attribution", result.attr), ("attention", result.attention))}
    return {"trained": trained, "model": model, "dev": dev, "inputs": inputs,
            "attention": result.attention, "dump": dump}


def test_a_decoders_attention_score_is_read_at_its_query(decoder):
    """The paper's max_ij A is 1 for every head of a decoder (its first token's only key is
    itself), so it ranks no head; the score heads are ranked by is the largest weight in the
    query's row, which is what the attribution engine's own attention holds there."""
    model, inputs = decoder["model"], decoder["inputs"]
    np.testing.assert_array_equal(decoder["dump"]["attention"], 1.0)
    scores = heads.ranking_scores(model, inputs, decoder["dump"], batch_size=48)
    assert scores["attribution"] is decoder["dump"]["attribution"]
    rows = torch.arange(N_DEV)
    query = inputs["attention_mask"].sum(dim=1) - 1
    engine = decoder["attention"][rows, :, :, query].amax(dim=-1).double().numpy()
    # the same probabilities by another path (batches of 48 here, the engine's own batching
    # there): equal to float32 rounding
    np.testing.assert_allclose(scores["attention"], engine, atol=1e-5)
    # and now the heads differ: layer 0's heads put 0.24-0.78 on their strongest key on
    # average, far apart, where the dump's maxima are all 1
    assert np.ptp(scores["attention"].mean(axis=0)[0]) > 0.3


def test_taylor_differentiates_the_next_token_loss_at_the_query(decoder):
    """Taylor's gradient is the gradient of the cross-entropy of the target token at the last
    real token: a central difference of that loss in float64, where the logits it is taken on
    are the stock model's at the query (no attnlab intervention, no padding). Llama's RMSNorm
    and rotary embeddings compute in float32 even in a float64 model, so the loss carries
    float32 rounding (~1e-7): a step of 1e-3 keeps its share of the difference near 1e-4, and
    the step's own error (~eps², times the third derivative) below that."""
    model = copy.deepcopy(decoder["model"]).double()
    inputs = {k: v[:6] for k, v in decoder["inputs"].items()}
    stock = model(input_ids=inputs["input_ids"][:1, : int(inputs["attention_mask"][0].sum())])
    np.testing.assert_allclose(stock.logits[0, -1].detach(),
                               models.logits(model, inputs)[0].detach(), atol=1e-9)
    grads = heads.taylor_gradients(model, inputs, batch_size=4)
    for layer, head in [(0, 1), (1, 1), (1, 3)]:
        numeric = gate_central_difference(model, inputs, layer, head, eps=1e-3)
        assert torch.allclose(grads[:, layer, head], numeric, rtol=1e-2, atol=2e-4)


@pytest.fixture(scope="module")
def curves(decoder):
    """Per-layer curves ranked by the attributions to the target token (the dump's) and to
    the predicted next token (the dump's where the model is right; those of the few it gets
    wrong attributed here by the same rule), and global curves."""
    model, inputs = decoder["model"], decoder["inputs"]
    scores = heads.ranking_scores(model, inputs, decoder["dump"])
    predicted = examples.predict(model, inputs).argmax(-1)
    engine = {"quadrature": "riemann_right", "steps": 20}
    by_label = pruning.label_rankings(
        scores["attribution"], "gold", predicted, inputs["labels"],
        lambda rows, target: pruning.attribution_maxima(
            model, {k: v[rows] for k, v in inputs.items()}, target, engine))
    rankings = {pruning.GOLD: [by_label["gold"]], pruning.PREDICTED: [by_label["predicted"]],
                pruning.ATTENTION: [scores["attention"]],
                pruning.RANDOM: pruning.random_scores(scores["attention"].shape, seed=0,
                                                      draws=5)}
    table = heads.importance_table(model, inputs, scores, list(heads.METHODS), random_seeds=5,
                                   seed=0)
    return (pruning.per_layer_curves(model, inputs, rankings),
            pruning.global_curves(model, inputs, table, PERCENTS))


def _areas(curves: pruning.Curves) -> dict[str, float]:
    """Each method's area under its accuracy-vs-fraction-pruned curve (random: their mean)."""
    return {method: float(np.trapezoid(correct.mean(axis=1), np.array(PERCENTS) / 100))
            for (method,), correct in curves.correct.items()}


def test_pruning_top_attribution_heads_costs_more_next_token_accuracy_than_random(curves,
                                                                                 decoder):
    """Global pruning (Fig. 4): attribution ranks the two heads the task needs last, so the
    model keeps its accuracy until one of them goes (above 6 of 8 heads pruned); a random
    order loses one of them early. Seed 0: areas 0.815 (attribution) vs 0.507 (random, mean
    of 5 orders), accuracy at half pruned 0.99 vs 0.58. The margins hold on each of seeds 0-4
    of the training (checked once: area gaps 0.18-0.43, attribution at half 0.98 or more), so
    another CPU's float path, which trains a slightly different model, keeps them."""
    _, global_ = curves
    area = _areas(global_)
    assert area["attribution"] - area["random"] >= 0.15, area
    # taylor ranks both mechanism heads last too (seed 0: the same area, 0.815)
    assert area["attribution"] - area["taylor"] >= -pruning.AUC_MARGIN, area
    at = global_.table.groupby(["method", "percent"])["accuracy"].mean()
    assert at["attribution", 50] >= 0.95, at.unstack()
    # 90 % of 8 heads masked keeps one head: no model of this task can be right then (it
    # needs two; seeds 0-4: 0.005-0.125), which the paper's 10 %-of-144-heads claim does not
    # foresee: retention above chance at most (0.125 - c) / (0.98 - c) < 0.13, far below the
    # bar
    chance = examples.chance(decoder["inputs"]["labels"])
    retention = (at["attribution", 90] - chance) / (at["attribution", 0] - chance)
    assert retention <= pruning.RETENTION_BAR / 2


def test_per_layer_pruning_by_attribution_on_a_decoder(curves):
    """Per-layer pruning (Fig. 3), each example's heads ranked by its own scores: the two
    lowest-attribution heads of each layer cost (almost) nothing, the highest one alone more
    than the lowest one (seeds 0-4 of the training, checked once: 0.32-0.88 left after the
    highest one, with dev accuracy 0.98 or more, and at most 0.02 lost after the two lowest,
    within the claim's own 0.05)."""
    per_layer, _ = curves
    ranked = per_layer.table[per_layer.table["label"] != "gold"]
    at = ranked.set_index(["ranking", "order", "k"])["accuracy"]
    drop = at["attribution", "lowest", 0] - at["attribution", "lowest", 2]
    assert drop <= pruning.LOW_PRUNE_TOLERANCE, at
    assert at["attribution", "lowest", 1] - at["attribution", "highest", 1] >= 0.05
    # judged on the predicted token's ranking, the numbers above (this project's findings)
    claims = {c["claim"]: c for c in pruning.per_layer_claims(per_layer)}
    ours = ", ranked by the predicted label"
    # where a CPU's float path trains a decoder right on every example with and without the
    # two lowest heads, the paired drop sits at the ceiling, which is not judged
    barely = claims[f"pruning low-attribution heads barely hurts{ours}"]
    assert barely["verdict"] == "holds" or barely["reason"].startswith("at the ceiling"), barely
    assert claims[f"pruning high-attribution heads hurts more than low-attribution "
                  f"ones{ours}"]["verdict"] == "holds"


def test_the_head_stages_run_on_a_decoders_dumps(decoder, tmp_path):
    """Rules head_importance and prune_eval as their jobs on config/induction.yaml, with the
    saved decoder and dumps of its first 100 dev examples as rule attribute writes them
    (attn_max over every entry, so 1): the attention ranking is read at the query."""
    decoder["trained"].save(tmp_path / "model")
    decoder["dev"].to_parquet(tmp_path / "dev.parquet")
    n = 100
    dump = decoder["dump"]
    write_dump([{"idx": int(decoder["dev"]["idx"][i]),
                 "attr_max": dump["attribution"][i].ravel().tolist(),
                 "attn_max": dump["attention"][i].ravel().tolist()} for i in range(n)],
               tmp_path / "part0.parquet", {"n_layers": 2, "n_heads": 4, "shard": 0,
                                            "n_shards": 1})
    config = yaml.safe_load(open("config/induction.yaml"))
    config["device"] = "cpu"
    config = validate_config(config)
    config["heads"].update(methods=["attribution", "attention", "random"], random_seeds=2,
                           prune_percents=[0, 50, 100])
    inputs = {"parts": [str(tmp_path / "part0.parquet")], "model": str(tmp_path / "model"),
              "dev": str(tmp_path / "dev.parquet")}
    out = {name: str(tmp_path / f"{name}.parquet") for name in
           ("importance", "per_layer", "global_", "claims")}
    head_importance.run(ModelJob.from_config("head_importance", config, task="induction",
                                             inputs=inputs, outputs={"importance":
                                                                     out["importance"]}))
    prune_eval.run(ModelJob.from_config(
        "prune_eval", config, task="induction",
        inputs={**inputs, "importance": out["importance"],
                "finetune_metrics": learned_metrics(tmp_path, "induction")},
        outputs={k: out[k] for k in ("per_layer", "global_", "claims")}))
    importance = pd.read_parquet(out["importance"])
    attention = importance[importance["method"] == "attention"]["importance"].to_numpy()
    expected = heads.query_attention_max(decoder["model"],
                                         {k: v[:n] for k, v in decoder["inputs"].items()})
    np.testing.assert_allclose(attention, expected.mean(axis=0).ravel(), atol=1e-6)
    claims = pd.read_parquet(out["claims"])
    # every claim judged, but where the pruned decoder still gets every example right on
    # both sides (on some CPUs' float path it does at 2 of 4 heads a layer): at the ceiling
    untested = claims[claims["verdict"] == "not testable"]
    assert untested["reason"].str.startswith("at the ceiling").all(), claims.to_string()
    assert len(untested) < len(claims) / 2, claims.to_string()
    # the per-layer ones (the paper's 4, the leak, the 4 on the predicted label's ranking),
    # and of the global ones the one on random (no taylor, no 90 %)
    assert len(claims) == 4 + 1 + 4 + 1
