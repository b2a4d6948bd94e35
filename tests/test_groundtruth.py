"""Attribution against the planted ground truth, on models trained with the default config.

Trains each default task exactly as `make run` does (same config values and seed), then
attributes its dev split and asks: does the strongest head-summed edge of some layer join
the planted token pair (the pair that decides the label)?
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from attnlab.dumps import attribute_shard, summarise_task
from attnlab.tasks import TaskSpec, prepare_task
from attnlab.training import finetune

CONFIG = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
ATTRIBUTION = {"quadrature": "gauss_legendre", "steps": 8, "target": "gold", "batch_size": 64,
               "max_examples": 150, "keep_full": False, "edge_min_fraction": 0.1,
               "max_edges_per_layer": 256, "top_pairs": 3}


@pytest.fixture(scope="module", params=list(CONFIG["tasks"]))
def trained(request, tmp_path_factory):
    name = request.param
    task = CONFIG["tasks"][name]
    folder = tmp_path_factory.mktemp(name)
    spec = TaskSpec.from_config(name, task)
    prepare_task(name, task, CONFIG["seed"], folder / "train.parquet", folder / "dev.parquet")
    model_cfg = {"truncate": False, **CONFIG["model"]}
    metrics = finetune(folder / "train.parquet", folder / "dev.parquet", spec, model_cfg,
                       {**CONFIG["finetune"], **task.get("finetune", {})}, torch.device("cpu"),
                       CONFIG["seed"], folder / "model")
    dump = folder / "part.parquet"
    attribute_shard(folder / "model", folder / "dev.parquet", spec, ATTRIBUTION, model_cfg, 0, 1,
                    torch.device("cpu"), dump, {})
    return name, metrics, summarise_task([dump], 1)


@pytest.mark.slow
def test_default_model_learns_the_task(trained):
    name, metrics, _ = trained
    assert metrics["dev_accuracy"] >= 0.95, (name, metrics)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "issue #2 open: the default models gather the keyword tokens at [CLS] (the strongest "
    "edges are [CLS]->token), so the planted pair is the strongest edge in only 15-42 % of "
    "dev examples. Rules a bag of tokens cannot decide (adjacent pairs, pairs at a fixed "
    "offset across [SEP]) were tried: the models then stay right when any one layer's "
    "attention is zeroed, so per-layer attributions sum to ~0 and their top edge is noise "
    "(17-38 %)"))
def test_attribution_finds_the_planted_pair_and_beats_attention(trained):
    name, _, summary = trained
    recovery = summary["planted_pair_recovery"]
    print(name, json.dumps(recovery))  # both numbers, for the record (pytest -s)
    assert recovery["examples"] == ATTRIBUTION["max_examples"]
    assert recovery["attribution"] >= 0.8, recovery
    assert recovery["attribution"] > recovery["attention"], recovery
