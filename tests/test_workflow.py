"""The workflow through the real snakemake command line: the planned jobs, and a tiny full run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def snakemake(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    # HF_HUB_OFFLINE: a test must never wait on the network; PYTHONPATH: the library in src/
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def job_counts(output: str) -> dict[str, int]:
    """The `Job stats:` table of a dry run, as {rule: count}."""
    table = output.split("Job stats:", 1)[1]
    return {rule: int(count) for rule, count in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)
            if rule != "total"}


def test_dry_run_plans_one_job_per_task_and_shard():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    n_tasks, n_shards = len(config["tasks"]), config["attribution"]["shards"]
    # --forceall: plan every job whatever results/ already holds
    result = snakemake("-n", "--forceall", "--cores", "2", "--configfile", "config.yaml")
    assert job_counts(result.stdout) == {
        "prepare_data": n_tasks,
        "finetune": n_tasks,
        "attribute": n_tasks * n_shards,
        "summarise_attributions": n_tasks,
        "head_importance": n_tasks,
        "prune_eval": n_tasks,
        "pruning_figures": 1,
        "task_correlation": 1,
        "trees": n_tasks,
        "example_views": n_tasks,
        "mine_triggers": n_tasks,
        "attack_eval": n_tasks,
        "effective_attention": n_tasks,
        "token_identifiability": n_tasks,
        "token_mixing": n_tasks,
        "attention_permutation": n_tasks,
        "adversarial_attention": n_tasks,
        "all": 1,
    }


TINY = {
    "name": "tiny",
    "seed": 0,
    "device": "cpu",
    "tasks": {
        "pairs": {
            "source": "synthetic",
            "synthetic": {"kind": "pair3", "n_train": 48, "n_dev": 12},
            "text_fields": ["premise", "hypothesis"],
            "label_names": ["entailment", "neutral", "contradiction"],
            "finetune": {"batch_size": 8},
        },
        "single": {
            "source": "synthetic",
            "synthetic": {"kind": "single2", "n_train": 48, "n_dev": 12},
            "text_fields": ["sentence"],
            "label_names": ["negative", "positive"],
        },
    },
    "model": {"scratch": {"layers": 2, "heads": 2, "hidden": 16, "intermediate": 32},
              "max_length": 64},
    "finetune": {"epochs": 1, "batch_size": 16, "learning_rate": 1.0e-3},
    "attribution": {"quadrature": "gauss_legendre", "steps": 4, "batch_size": 8, "shards": 2,
                    "max_examples": 6, "keep_full": True},
    "trees": {"examples": 2},
    "triggers": {"source_examples": 8, "score_threshold": 0.0, "random_draws": 1},
    "identifiability": {"token_identifiability": {"train_examples": 24, "epochs": 2},
                        "token_mixing": {"examples": 2, "exact_max_tokens": 14}},
    "explanation": {"attention_permutation": {"permutations": 2},
                    "adversarial_keys": {"train_examples": 24, "epochs": 1},
                    "adversarial_attention": {"examples": 4, "layers": [1], "steps": 5}},
}


@pytest.mark.slow
def test_tiny_config_runs_end_to_end(tmp_path):
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(TINY))
    work = tmp_path / "work"  # --directory: the repository's results/ stays untouched
    args = ("--cores", "2", "--configfile", str(configfile), "--directory", str(work))
    snakemake(*args, timeout=1800)

    results = work / "results" / "tiny"
    for task in TINY["tasks"]:
        for path in ("data/{t}/train.parquet", "data/{t}/dev.parquet", "data/{t}/summary.json",
                     "finetune/{t}/model/config.json", "finetune/{t}/metrics.json",
                     "logs/prepare_data/{t}.log", "logs/finetune/{t}.log",
                     "benchmarks/prepare_data/{t}.tsv", "benchmarks/finetune/{t}.tsv"):
            assert (results / path.format(t=task)).is_file(), path.format(t=task)
        for shard in range(TINY["attribution"]["shards"]):
            shard_dir = results / "attributions" / f"task={task}" / f"shard={shard}"
            assert (shard_dir / "part.parquet").is_file()
            assert (shard_dir / "_summary.json").is_file()
            assert (results / "logs" / "attribute" / task / f"shard={shard}.log").is_file()
        gathered = results / "attributions" / f"task={task}" / "_summary.json"
        summary = json.loads(gathered.read_text())
        assert summary["examples"] == TINY["attribution"]["max_examples"]
    for path in ("heads/{t}/importance.parquet", "heads/{t}/per_layer.parquet",
                 "heads/{t}/global.parquet", "heads/{t}/claims.parquet"):
        for task in TINY["tasks"]:
            assert (results / path.format(t=task)).is_file(), path.format(t=task)
    for path in ("pruning_per_layer.png", "pruning_global.png", "task_correlation.png",
                 "task_correlation.parquet", "task_correlation_claims.parquet"):
        assert (results / "heads" / path).is_file(), path
    for task in TINY["tasks"]:
        for path in ("trees/{t}/edges.parquet", "trees/{t}/trees.parquet",
                     "trees/{t}/claims.parquet", "trees/{t}/summary.json", "trees/{t}/sizes.png",
                     "views/{t}/index.html",
                     "triggers/{t}/source.parquet", "triggers/{t}/patterns.parquet",
                     "triggers/{t}/triggers.parquet", "triggers/{t}/attack.parquet",
                     "triggers/{t}/claims.parquet", "triggers/{t}/attack.png",
                     "benchmarks/trees/{t}.tsv", "benchmarks/attack_eval/{t}.tsv"):
            assert (results / path.format(t=task)).is_file(), path.format(t=task)
        # one tree row per attributed example; the sampled examples rendered
        trees = pd.read_parquet(results / "trees" / task / "trees.parquet")
        assert len(trees) == TINY["attribution"]["max_examples"]
        assert len(list((results / "trees" / task / "figures").glob("tree_*.png"))) == 2
        assert len(list((results / "views" / task).glob("heatmap_*.png"))) == 2
        page = (results / "views" / task / "index.html").read_text()
        assert page.count('src="data:image/png;base64,') == 2 * 2  # heatmap and tree, embedded
        patterns = pd.read_parquet(results / "triggers" / task / "patterns.parquet")
        assert len(patterns) == TINY["triggers"]["source_examples"]
    for path in ("identifiability/{t}/effective_attention.parquet",
                 "identifiability/{t}/attention_to_tokens.parquet",
                 "identifiability/{t}/effective_attention_claims.parquet",
                 "identifiability/{t}/effective_attention.png",
                 "identifiability/{t}/token_identifiability.parquet",
                 "identifiability/{t}/token_identifiability_claims.parquet",
                 "identifiability/{t}/token_identifiability.png",
                 "identifiability/{t}/token_mixing.parquet",
                 "identifiability/{t}/token_mixing_offsets.parquet",
                 "identifiability/{t}/token_mixing_claims.parquet",
                 "identifiability/{t}/token_mixing.png",
                 "explanation/{t}/attention_permutation.parquet",
                 "explanation/{t}/attention_permutation_claims.parquet",
                 "explanation/{t}/attention_permutation.png",
                 "explanation/{t}/adversarial_keys.parquet",
                 "explanation/{t}/adversarial_attention.parquet",
                 "explanation/{t}/adversarial_claims.parquet",
                 "explanation/{t}/adversarial.png",
                 "benchmarks/token_mixing/{t}.tsv", "logs/adversarial_attention/{t}.log"):
        for task in TINY["tasks"]:
            assert (results / path.format(t=task)).is_file(), path.format(t=task)
    # the tiny model's d_v (16 / 2 heads = 8) is below every synthetic sequence length (>= 10),
    # so the effective attention differs from the raw attention on every example
    effective = pd.read_parquet(results / "identifiability/pairs/effective_attention.parquet")
    assert (effective["null_dim"] > 0).all() and (effective["pearson_r"] < 1).all()
    # examples longer than exact_max_tokens get the probe estimate (default probes: 32)
    mixing = pd.read_parquet(results / "identifiability/pairs/token_mixing.parquet")
    assert mixing["example"].nunique() == 2 and set(mixing["layer"]) == {1, 2}
    expected = mixing["length"].map(lambda n: "exact" if n <= 14 else "probes=32")
    assert (mixing["estimator"] == expected).all()
    adversarial = pd.read_parquet(results / "explanation/pairs/adversarial_attention.parquet")
    assert (adversarial["tvd"] <= 0.01).all() and set(adversarial["layer"]) == {1}
    # the shards of all tasks read back as one dataset
    attributions = pd.read_parquet(results / "attributions")
    assert set(attributions["task"].astype(str)) == set(TINY["tasks"])

    # a second run finds everything up to date
    rerun = snakemake("-n", *args).stdout
    assert "Nothing to be done" in rerun, rerun[-3000:]
