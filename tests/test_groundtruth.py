"""Attribution against the planted ground truth, on models trained with the default config.

Trains each default task exactly as `make run` does (same config values and seed), then
attributes its dev split and asks: does the strongest head-summed edge of some layer join
the planted token pair (the pair that decides the label)?

A share over ~150 examples moves by a few hundredths between seeds and between CPUs (another
CPU's float arithmetic takes training down another path), so every assertion keeps a margin
(attnlab.groundtruth: RECOVERY_BAR, TIE_MARGIN) and no outcome of this one seed is asserted
strictly. Measured over seeds and CPUs (docs/replication.md), attribution beats raw attention
clearly on syn_mnli only; on syn_rte and syn_sst2 attention finds the pair about as often, so
there the test asserts a tie, as the ground-truth claims say.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import DEFAULT_CONFIG

from attnlab.dumps import attribute_shard, summarise_task
from attnlab.groundtruth import RECOVERY_BAR, TIE_MARGIN, recovery_claims
from attnlab.tasks import TaskSpec

ATTRIBUTION = {**DEFAULT_CONFIG["attribution"], "max_examples": 150}
# The tasks on which attribution finds the planted pair clearly (by TIE_MARGIN) more often than
# raw attention; on the others the two tie.
ATTRIBUTION_WINS = {"syn_mnli"}


@pytest.fixture(scope="module", params=list(DEFAULT_CONFIG["tasks"]))
def trained(request, default_task_model):
    name = request.param
    folder, metrics = default_task_model(name)
    dump = folder / "ground_truth_dump.parquet"
    attribute_shard(folder / "model", folder / "dev.parquet",
                    TaskSpec.from_config(name, DEFAULT_CONFIG["tasks"][name]), ATTRIBUTION,
                    {"truncate": False, **DEFAULT_CONFIG["model"]}, 0, 1, torch.device("cpu"),
                    dump, {})
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
    # lowest measured: 0.90 (syn_mnli), so 0.1 of margin
    assert recovery["attribution"] >= RECOVERY_BAR, recovery
    lead = recovery["attribution"] - recovery["attention"]
    if name in ATTRIBUTION_WINS:
        assert lead >= TIE_MARGIN, recovery  # measured 0.28-0.33
    else:
        assert lead >= -TIE_MARGIN, recovery  # a tie: measured -0.04 to +0.07
    # and the ground-truth claims of the workflow say the same
    holding = {row["claim"] for row in recovery_claims(recovery) if row["verdict"] == "holds"}
    assert {"the strongest attribution edge of some layer joins the planted pair",
            "attribution finds the planted pair at least as often as attention"} <= holding
    if name in ATTRIBUTION_WINS:
        assert "attribution finds the planted pair clearly more often than attention" in holding
