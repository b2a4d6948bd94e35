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
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import DEFAULT_CONFIG

from attnlab.analyses.attribution_summary import (
    RECOVERY_BAR,
    TIE_MARGIN,
    recovery_claims,
    summarise_task,
)
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
    return name, metrics, summarise_task([dump], 1, tolerance=ATTRIBUTION["tolerance"])


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
    # the claim's bar is RECOVERY_BAR (0.8); lowest measured 0.79 (syn_mnli, seed 1, whose
    # training stopped at 20 epochs above stop_loss), so the test keeps TIE_MARGIN below it
    assert recovery["attribution"] >= RECOVERY_BAR - TIE_MARGIN, recovery
    lead = recovery["attribution"] - recovery["attention"]
    if name in ATTRIBUTION_WINS:
        assert lead >= TIE_MARGIN, recovery  # measured 0.28-0.52
    else:
        assert lead >= -TIE_MARGIN, recovery  # at least a tie: measured -0.04 to +0.28
    # and the ground-truth claim of the workflow says the same
    holding = {row["claim"] for row in recovery_claims(recovery) if row["verdict"] == "holds"}
    assert "attribution finds the planted pair at least as often as attention" in holding
