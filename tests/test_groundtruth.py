"""Attribution against the planted ground truth, on models trained with the default config.

Trains each default task exactly as `make run` does (same config values and seed), then
attributes its dev split and asks: does the strongest head-summed edge of some layer join
the planted token pair (the pair that decides the label)?

Another CPU's float arithmetic takes training down another path, which on these saturating
models can end as far from this machine's model as another seed does: so every assertion keeps
a margin below what seeds 0 and 1 measured (docs/replication.md), and no outcome of one seed is
asserted strictly. Attribution beats raw attention clearly on syn_mnli on every run we have; on
syn_rte and syn_sst2 attention finds the pair as often on some runs (a tie) and clearly less
often on others, so there the test asserts "at least a tie", as the ground-truth claims do.
The metric itself and the claims' bars are tested on hand-built dump rows and shares.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from conftest import DEFAULT_CONFIG

from attnlab.analyses.attribution_summary import (
    read_checked_dump,
    recovery_claims,
    summarise_task,
)
from attnlab.data.groundtruth import planted_pair_hits, planted_pair_recovery, strongest_edges
from attnlab.model_job import ModelJob
from attnlab.stages import attribute

ATTRIBUTION = {**DEFAULT_CONFIG["attribution"], "max_examples": 150, "shards": 1}
# The tasks on which attribution finds the planted pair clearly (by TIE_MARGIN) more often than
# raw attention; on the others the two tie.
ATTRIBUTION_WINS = {"syn_mnli"}


@pytest.fixture(scope="module", params=list(DEFAULT_CONFIG["tasks"]))
def trained(request, default_task_model):
    name = request.param
    folder, metrics = default_task_model(name)
    dump = folder / "ground_truth_dump.parquet"
    config = {**DEFAULT_CONFIG, "attribution": ATTRIBUTION, "device": "cpu"}
    job = ModelJob.from_config("attribute", config, task=name,
                               inputs={"model": folder / "model", "dev": folder / "dev.parquet"},
                               outputs={"part": dump, "summary": folder / "ground_truth.json"})
    attribute.run(replace(job, wildcards={**job.wildcards, "shard": "0"}))
    return name, metrics, summarise_task(read_checked_dump([dump], 1), [dump],
                                         tolerance=ATTRIBUTION["tolerance"])


@pytest.mark.slow
def test_default_model_learns_the_task(trained):
    name, metrics, _ = trained
    assert metrics["dev_accuracy"] >= 0.95, (name, metrics)


@pytest.mark.slow
def test_attribution_finds_the_planted_pair_and_wins_or_ties_attention(trained):
    name, _, summary = trained
    recovery = summary["planted_pair_recovery"]
    print(name, json.dumps(recovery))  # both numbers, for the record (pytest -s)
    # examples with a deciding pair: all but the last class's examples without a trigger
    assert recovery["examples"] >= ATTRIBUTION["max_examples"] / 3, recovery
    # the claim's bar is 0.8; lowest measured 0.79 (syn_mnli, seed 1, whose training stopped at
    # 20 epochs above stop_loss), so the test keeps the tie margin (0.1) below it
    assert recovery["attribution"] >= 0.7, recovery
    lead = recovery["attribution"] - recovery["attention"]
    if name in ATTRIBUTION_WINS:
        assert lead >= 0.1, recovery  # measured 0.28-0.52
    else:
        assert lead >= -0.1, recovery  # at least a tie: measured -0.04 to +0.28


_IDX = itertools.count()


def dump_row(planted: tuple[int, int] | None, edges: list[tuple[int, int, int]],
             attention_top: list[tuple[int, int]]) -> dict:
    """A dump row's ground-truth columns: `edges` as (layer, i, j), each layer's strongest
    first; `attention_top` as (i, j), raw attention's strongest edge of each layer."""
    layer, i, j = zip(*edges, strict=True)
    top_i, top_j = zip(*attention_top, strict=True)
    a, b = planted or (math.nan, math.nan)
    return {"idx": next(_IDX), "planted_i": a, "planted_j": b, "edge_layer": list(layer),
            "edge_i": list(i), "edge_j": list(j), "attn_top_i": list(top_i),
            "attn_top_j": list(top_j)}


def test_recovery_counts_a_pair_found_by_the_strongest_edge_of_some_layer_either_way_round():
    dump = pd.DataFrame([
        # found by layer 0's strongest edge, reversed (j reads i counts as well); attention not
        dump_row((1, 3), [(0, 3, 1), (0, 2, 0), (1, 0, 2)], [(0, 1), (2, 0)]),
        # the pair is layer 0's second edge and no layer's strongest: missed; attention finds
        # it in layer 1
        dump_row((2, 4), [(0, 0, 1), (0, 2, 4), (1, 1, 2)], [(0, 1), (4, 2)]),
        # found by layer 1's strongest edge, with the layers' edges interleaved in the row
        dump_row((1, 2), [(1, 2, 1), (0, 0, 1), (1, 0, 2)], [(1, 2), (0, 0)]),
        # no planted pair (a class decided by the absence of a trigger): not counted
        dump_row(None, [(0, 1, 2)], [(1, 2)]),
    ])
    assert strongest_edges(dump.iloc[2]) == {1: (2, 1), 0: (0, 1)}
    assert planted_pair_recovery(dump) == {"examples": 3, "attribution": 2 / 3,
                                           "attention": 2 / 3}
    found = planted_pair_hits(dump)
    assert found["idx"].tolist() == [0, 1, 2]
    assert found["attribution"].tolist() == [True, False, True]
    assert found["attention"].tolist() == [False, True, True]


def test_recovery_without_planted_pairs_counts_no_example():
    dump = pd.DataFrame([dump_row(None, [(0, 1, 2)], [(1, 2)])])
    recovery = planted_pair_recovery(dump)
    assert recovery["examples"] == 0 and math.isnan(recovery["attribution"])
    assert recovery_claims(planted_pair_hits(dump)) == []


def hits(attribution: list[int], attention: list[int]) -> pd.DataFrame:
    """Per-example hits (1: found) by attribution and attention."""
    return pd.DataFrame({"idx": range(len(attribution)), "attribution": np.array(
        attribution, dtype=bool), "attention": np.array(attention, dtype=bool)})


@pytest.mark.parametrize(("found", "verdicts"), [
    # 60 of 60 by attribution and by attention: above 0.8; both at the ceiling on every
    # example, where the data cannot tell them apart: neither comparison is testable
    ((60, 60, 60), ("holds", "not testable", "not testable")),
    # 40 of 60 (interval about [0.55, 0.78]) against 10 found by attention alone: the lead
    # of 0.5 wins clearly
    ((40, 0, 10), ("does not hold", "holds", "holds")),
    # 50 of 60 by attribution (0.83, the interval contains 0.8); attention finds all 60: a lead
    # of -0.17 whose interval contains the tie margin
    ((50, 50, 60), ("inconclusive", "inconclusive", "does not hold")),
])
def test_the_ground_truth_findings_judge_the_interval_over_examples(found, verdicts):
    by_attribution, both, by_attention = found
    attribution = [1] * by_attribution + [0] * (60 - by_attribution)
    attention = [1] * both + [0] * (by_attribution - both) + [1] * (by_attention - both) + [0] * (
        60 - by_attribution - (by_attention - both))
    claims = recovery_claims(hits(attribution, attention))
    assert [row["claim"] for row in claims] == [
        "the strongest attribution edge of some layer joins the planted pair",
        "attribution finds the planted pair at least as often as attention",
        "attribution finds the planted pair clearly more often than attention"]
    assert tuple(row["verdict"] for row in claims) == verdicts
    assert {row["kind"] for row in claims} == {"finding"}
    assert all(row["n"] == 60 and row["source"].startswith("Hao et al. 2021") for row in claims)
    assert claims[1]["value"] == pytest.approx((by_attribution - by_attention) / 60)
    # every comparison keeps its interval, judged or not, and it always has a width
    assert all(row["low"] < row["high"] for row in claims)
    if by_attribution == by_attention == 60:
        assert {row["reason"] for row in claims[1:]} == {
            "at the ceiling (every unit at 1 on both sides)"}


def test_a_paired_lead_is_narrower_than_the_shares_alone_make_it():
    # attribution and attention find the pair in the same 30 of 60 examples, attribution in 6
    # more: the paired lead is 0.1 with an interval from the 6 discordant examples only
    # (Newcombe's, about [0.018, 0.18]); unpaired, 0.6 against 0.5 of 60 each would span
    # about [-0.07, 0.28]
    attribution = [1] * 36 + [0] * 24
    attention = [1] * 30 + [0] * 30
    lead = recovery_claims(hits(attribution, attention))[2]
    assert lead["value"] == pytest.approx(0.1)
    assert lead["low"] > 0.01 and lead["high"] - lead["low"] < 0.2
