"""Attribution against the planted ground truth, on models trained with the default config.

Trains each default task exactly as `make run` does (same config values and seed), then
attributes its dev split and asks: does the strongest head-summed edge of some layer join
the planted token pair (the pair that decides the label)?
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import DEFAULT_CONFIG

from attnlab.dumps import attribute_shard, summarise_task
from attnlab.tasks import TaskSpec

ATTRIBUTION = {**DEFAULT_CONFIG["attribution"], "max_examples": 150}


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
def test_attribution_finds_the_planted_pair_and_beats_attention(trained):
    name, _, summary = trained
    recovery = summary["planted_pair_recovery"]
    print(name, json.dumps(recovery))  # both numbers, for the record (pytest -s)
    # examples with a deciding pair: all but the last class's examples without a trigger
    assert recovery["examples"] >= ATTRIBUTION["max_examples"] / 3, recovery
    assert recovery["attribution"] >= 0.8, recovery
    assert recovery["attribution"] > recovery["attention"], recovery
