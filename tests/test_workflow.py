"""The workflow through the real snakemake command line: the planned jobs, and a tiny full run."""

from __future__ import annotations

import copy
import fcntl
import html
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import run_folder
from test_hub import glue_like, write_hub_folder
from transformers import BertConfig, BertForSequenceClassification

from attnlab.analyses.claims import KINDS
from attnlab.analyses.verdicts import SIDES, UNTESTABLE, VERDICTS, Bar, Interval, verdict
from attnlab.data.tokenization import build_tokenizer
from attnlab.plumbing.config import validate_config
from attnlab.report.findings import checks_line, counts, findings_line
from attnlab.rule_params import rule_params

ROOT = Path(__file__).resolve().parents[1]


# HF_HUB_OFFLINE: a test must never wait on the network; PYTHONPATH: the library in src/
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}


def snakemake(
    *args: str, timeout: int = 300, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=ROOT, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=timeout,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def job_counts(output: str) -> dict[str, int]:
    """The `Job stats:` table of a dry run, as {rule: count}."""
    table = output.split("Job stats:", 1)[1]
    return {rule: int(count) for rule, count in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)
            if rule != "total"}


@dataclass
class Job:
    """One job as Snakemake prints it when it plans or starts the job."""

    rule: str
    local: bool  # a localrule: runs in the Snakemake process, never submitted
    fields: dict[str, str] = field(default_factory=dict)  # jobid, wildcards, log, resources...

    def _pairs(self, key: str) -> dict[str, str]:
        # "name=tiny, task=pairs"; resource values have no ", " inside but for "mem=16 GB"
        pairs = (item.partition("=") for item in self.fields.get(key, "").split(", "))
        return {k: v for k, _, v in pairs if k}

    @property
    def wildcards(self) -> dict[str, str]:
        return self._pairs("wildcards")

    @property
    def resources(self) -> dict[str, str]:
        return self._pairs("resources")


def jobs_of(output: str) -> list[Job]:
    """Every job block ("rule x:" or "localrule x:" and its indented fields) in the output."""
    jobs = []
    for line in output.splitlines():
        if header := re.fullmatch(r"(local)?rule (\w+):", line):
            jobs.append(Job(header[2], bool(header[1])))
        elif jobs and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            jobs[-1].fields.setdefault(key, value)
    return jobs


def jobs(output: str) -> list[tuple[str, str, dict[str, str]]]:
    """The (rule, job id, wildcards) of every job Snakemake printed, planned or started."""
    return [(job.rule, job.fields.get("jobid", ""), job.wildcards) for job in jobs_of(output)]

# The jobs every configuration has once: the report's pages and the target rule.
PER_CONFIG = {"run_summary": 1, "claims": 1, "figures": 1, "all": 1}
# The per-task stages after attribution: trees, views and triggers (from the dumps and the
# model), identifiability and explanation (from the fine-tuned model).
FROM_MODEL = ("trees", "example_views", "mine_triggers", "attack_eval",
              "effective_attention", "token_identifiability", "token_mixing",
              "attention_permutation", "adversarial_attention", "interaction_methods")


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
        "quadrature_study": 1,
        **dict.fromkeys(FROM_MODEL, n_tasks),
        **PER_CONFIG,
    }


def test_a_task_for_the_correlation_only_runs_what_fig_5_reads(tmp_path):
    # TINY's dissimilar pair with its single-sentence task there for Fig. 5 only
    config = merged(TINY, {"tasks": {"single": {"role": "correlation"}}})
    result = snakemake("-n", "--cores", "2", "--configfile", str(write_config(tmp_path, config)),
                       "--directory", str(tmp_path))
    planned = {(job.rule, job.wildcards.get("task")) for job in jobs_of(result.stdout)}
    single = {rule for rule, task in planned if task == "single"}
    assert single == {"prepare_data", "finetune", "attribute", "summarise_attributions",
                      "head_importance"}
    # every stage runs on the other task, and the correlation reads both
    assert {rule for rule, task in planned if task == "pairs"} == single | {"prune_eval",
                                                                            *FROM_MODEL}
    assert {"task_correlation", "quadrature_study", "pruning_figures"} <= {r for r, _ in planned}
    # and it attributes only the examples head_importance reads (heads.importance_examples)
    filled = validate_config(copy.deepcopy(config))
    assert rule_params("attribute", filled, task="single")["head_examples_only"] is True
    assert rule_params("attribute", filled, task="pairs")["head_examples_only"] is False


def test_replicate_config_runs_every_seed_dependent_stage_once_per_seed():
    default = yaml.safe_load((ROOT / "config.yaml").read_text())
    replicate = yaml.safe_load((ROOT / "config" / "replicate.yaml").read_text())
    # the default configuration but for its name and seeds
    assert {key for key in default | replicate
            if default.get(key) != replicate.get(key)} == {"name", "seeds"}
    seeds = replicate["seeds"]
    assert len(seeds) == 5
    result = snakemake("-n", "--forceall", "--cores", "2", "--configfile", "config/replicate.yaml")
    counts = job_counts(result.stdout)
    # everything but the report's pages runs once per seed (each seed's run prepares its data
    # again, from the same seed: identical data, in seconds); one claims page gathers them all
    assert {rule: counts[rule] for rule in PER_CONFIG} == PER_CONFIG
    # but the stages beyond the papers and the views of one of them (FIRST_SEED_RULES): in the
    # first seed's run only
    first_only = {rule: counts.pop(rule)
                  for rule in ("quadrature_study", "interaction_methods", "example_views")}
    assert first_only == {"quadrature_study": 1, "interaction_methods": 3, "example_views": 3}
    assert {rule: n // len(seeds) for rule, n in counts.items() if rule not in PER_CONFIG} == {
        "prepare_data": 3, "finetune": 3, "attribute": 3, "summarise_attributions": 3,
        "head_importance": 3, "prune_eval": 3, "pruning_figures": 1, "task_correlation": 1,
        **dict.fromkeys(set(FROM_MODEL) - set(first_only), 3)}
    for rule in first_only:
        ran_in = {job.wildcards["name"] for job in jobs_of(result.stdout) if job.rule == rule}
        assert ran_in == {f"replicate/seed={seeds[0]}"}
    finetuned = {job.wildcards["name"] for job in jobs_of(result.stdout) if job.rule == "finetune"}
    assert finetuned == {f"replicate/seed={seed}" for seed in seeds}


def test_the_five_seed_real_config_is_real_yaml_over_seeds_with_its_control(tmp_path):
    """config/real-seeds.yaml is config/real.yaml but for its seeds, its control and its sample
    sizes (every size at least the floor of 50 units a seed); its plan runs every paper stage
    in each of the five seeds and once on the untrained control, the stages beyond the papers
    in seed 0 only."""
    def flat(tree: dict, prefix: str = "") -> dict:
        out = {}
        for key, value in tree.items():
            if isinstance(value, dict):
                out |= flat(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value
        return out

    real = flat(yaml.safe_load((ROOT / "config" / "real.yaml").read_text()))
    seeds = flat(yaml.safe_load((ROOT / "config" / "real-seeds.yaml").read_text()))
    differ = {key for key in real | seeds if real.get(key) != seeds.get(key)}
    sizes = differ - {"seeds", "controls"}
    assert all(key.endswith("examples") for key in sizes), sizes
    assert all(seeds[key] >= 50 for key in sizes)
    assert (seeds["seeds"], seeds["controls"]) == ([0, 1, 2, 3, 4], ["untrained"])
    result = snakemake("-n", "--forceall", "--cores", "2", "--configfile",
                       "config/real-seeds.yaml", "--directory", str(tmp_path))
    runs = {}
    for job in jobs_of(result.stdout):
        if "name" in job.wildcards:
            runs.setdefault(job.rule, set()).add(job.wildcards["name"])
    every = {f"real/seed={seed}" for seed in range(5)} | {"real/control=untrained"}
    paper_stages = {"finetune", "attribute", "head_importance", "prune_eval", "task_correlation",
                    "trees", "mine_triggers", "attack_eval", "effective_attention",
                    "token_identifiability", "token_mixing", "attention_permutation",
                    "adversarial_attention"}
    assert {rule: runs[rule] for rule in paper_stages} == dict.fromkeys(paper_stages, every)
    assert {rule: runs[rule] for rule in ("interaction_methods", "quadrature_study")} == (
        dict.fromkeys(("interaction_methods", "quadrature_study"), {"real/seed=0"}))
    # one job of each per task (or once) in each of those runs
    counts = job_counts(result.stdout)
    assert (counts["prune_eval"], counts["interaction_methods"], counts["quadrature_study"]) == (
        6 * 2, 2, 1)


def test_the_untrained_config_is_the_default_with_nothing_learned():
    default = yaml.safe_load((ROOT / "config.yaml").read_text())
    untrained = yaml.safe_load((ROOT / "config" / "untrained.yaml").read_text())
    assert {key for key in default | untrained
            if default.get(key) != untrained.get(key)} == {"name", "finetune"}
    assert untrained["finetune"] == {**default["finetune"], "epochs": 1,
                                     "learning_rate": 1.0e-12}


def test_the_untrained_control_reruns_every_stage_with_claims_on_the_starting_model(tmp_path):
    """controls: [untrained] plans a second run in default/control=untrained/ of every stage
    that judges claims (and what they read), with a finetune that trains nothing, and rule
    claims reads its claims tables; figures and views are the run's own only."""
    config = {**yaml.safe_load((ROOT / "config.yaml").read_text()), "controls": ["untrained"]}
    configfile = write_config(tmp_path, config)
    result = snakemake("-n", "--forceall", "--cores", "2", "--configfile", str(configfile),
                       "--directory", str(tmp_path))
    twice = 2 * len(config["tasks"])  # one shard a task
    # the stages beyond the papers (FIRST_SEED_RULES) are the run's own only
    assert job_counts(result.stdout) == {
        "prepare_data": twice, "finetune": twice, "attribute": twice,
        "summarise_attributions": twice, "head_importance": twice, "prune_eval": twice,
        "task_correlation": 2, "pruning_figures": 1, "quadrature_study": 1,
        **dict.fromkeys(FROM_MODEL, twice), "example_views": twice // 2,
        "interaction_methods": twice // 2, **PER_CONFIG}
    control = [job for job in jobs_of(result.stdout)
               if job.wildcards.get("name") == "default/control=untrained"]
    assert {job.rule for job in control} >= {"finetune", "trees", "attack_eval", "prune_eval"}
    (claims,) = [job for job in jobs_of(result.stdout) if job.rule == "claims"]
    assert "control=untrained/heads/task_correlation_claims.parquet" in claims.fields["input"]


@pytest.mark.parametrize("configfile, expected", [
    # 4 GLUE tasks and RTE with shuffled labels (Fig. 5's floor, of what the correlation reads
    # only): a train and a dev split of each dataset, downloaded once; 8 attribution shards per
    # task
    ("config/paper.yaml", {
        "download_data": 8, "download_model": 1, "prepare_data": 5, "finetune": 5,
        "attribute": 40, "summarise_attributions": 5, "head_importance": 5, "prune_eval": 4,
        "pruning_figures": 1, "task_correlation": 1, "quadrature_study": 1,
        **dict.fromkeys(FROM_MODEL, 4),
        **PER_CONFIG}),
    ("config/bart-mnli.yaml", {
        "download_data": 2, "download_model": 1, "prepare_data": 1, "finetune": 1,
        "attribute": 8, "summarise_attributions": 1, "head_importance": 1, "prune_eval": 1,
        "pruning_figures": 1, "task_correlation": 1, "quadrature_study": 1,
        **dict.fromkeys(FROM_MODEL, 1),
        **PER_CONFIG}),
    # local files: nothing to download but the model
    ("config/own-model-and-data.yaml", {
        "download_model": 1, "prepare_data": 1, "finetune": 1, "attribute": 1,
        "summarise_attributions": 1, "head_importance": 1, "prune_eval": 1,
        "pruning_figures": 1, "task_correlation": 1, "quadrature_study": 1,
        **dict.fromkeys(FROM_MODEL, 1),
        **PER_CONFIG}),
    # a decoder on next-token prompts: the stages of a language model, none about class labels
    ("config/induction.yaml", {
        "prepare_data": 1, "finetune": 1, "attribute": 1, "summarise_attributions": 1,
        "trees": 1, "example_views": 1, "head_importance": 1, "prune_eval": 1,
        "pruning_figures": 1, "effective_attention": 1, "interaction_methods": 1,
        "induction": 1, "induction_heads": 1, **PER_CONFIG}),
])
def test_each_configuration_plans_its_whole_dag_without_network(configfile, expected):
    result = snakemake("-n", "--forceall", "--cores", "2", "--configfile", configfile)
    assert job_counts(result.stdout) == expected


TINY = {
    "name": "tiny",
    "seed": 0,
    # the rules that run a model ask for a GPU (and fall back to the CPU)
    "device": "auto",
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
    # the 6 attributed examples score the heads, the other 6 evaluate global pruning
    "heads": {"dissimilar_pairs": [["pairs", "single"]], "min_evaluation_examples": 6},
    "trees": {"examples": 2},
    "triggers": {"source_examples": 8, "score_threshold": 0.0, "random_draws": 1},
    "identifiability": {"token_identifiability": {"train_examples": 24, "epochs": 2},
                        "token_mixing": {"examples": 2, "exact_max_tokens": 14}},
    "explanation": {"attention_permutation": {"permutations": 2},
                    "adversarial_keys": {"train_examples": 24, "epochs": 1},
                    "adversarial_attention": {"examples": 4, "layers": [1], "steps": 5}},
    "interaction_methods": {"examples": 3, "deletion_steps": 3, "bootstrap": 100},
}


def write_config(work: Path, config: dict, name: str = "config.yaml") -> Path:
    work.mkdir(parents=True, exist_ok=True)
    path = work / name
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class TinyRun:
    """The tiny configuration, run to the end in its own working directory."""

    work: Path
    configfile: Path
    results: Path
    interruption: dict = field(default_factory=dict)

    def args(self, configfile: Path | None = None) -> tuple[str, ...]:
        # the local profile as `make run` names it, with the profile's one GPU slot: the model
        # jobs (device auto) run one at a time, as on a machine with one GPU; --directory: the
        # repository's results/ stays untouched
        return ("--profile", "profiles/local", "--cores", "2",
                "--configfile", str(configfile or self.configfile), "--directory", str(self.work))


def whole(path: Path) -> bool:
    """Whether a dump or summary file reads back completely."""
    try:
        pq.read_table(path) if path.suffix == ".parquet" else json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def kill_during_attribute(run: TinyRun, timeout: float = 1800) -> dict:
    """Start the tiny run and kill it, Snakemake and its jobs at once (SIGKILL to the process
    group, as a crash or power loss would), while an attribute job runs and Snakemake has seen
    another finish. Returns the shards (task, shard) that were running and those finished, the
    files of the finished ones with their mtimes, and what the killed jobs had left."""
    output = run.work / "interrupted.log"
    with open(output, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "snakemake", *run.args()], cwd=ROOT, env=ENV, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        printed = output.read_text()
        # (a block still being printed may lack its wildcards)
        shards = {jobid: (w["task"], w["shard"])
                  for rule, jobid, w in jobs(printed) if rule == "attribute" and "shard" in w}
        finished = {shards[jobid] for jobid in re.findall(r"^Finished jobid: (\d+)", printed,
                                                          re.M) if jobid in shards}
        # a job's log file appears when its script starts (after its imports)
        running = {(task, shard) for task, shard in set(shards.values()) - finished if (
            run.results / "logs" / "attribute" / task / f"shard={shard}.log").exists()}
        if finished and running:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            shard_files = {shard: [run.results / "attributions" / f"task={shard[0]}" /
                                   f"shard={shard[1]}" / name
                                   for name in ("part.parquet", "_summary.json")]
                           for shard in finished | running}
            return {"running": running, "finished": finished,
                    "finished_files": {path: path.stat().st_mtime_ns for shard in finished
                                       for path in shard_files[shard]},
                    # what the killed jobs left under a final name, and whether it reads whole
                    "left_by_killed": {path: whole(path) for shard in running
                                       for path in shard_files[shard] if path.exists()}}
        time.sleep(0.05)
    process.kill()
    process.wait()
    return {}


def shared_tiny_run(tmp_path_factory) -> TinyRun:
    """One run of the tiny configuration, its report built, made once per test session: this
    module inspects it and dry-runs changes against it, and the SLURM test compares its own run
    with it. A worker that finds another making it waits for it (a lock on the run's folder).

    The run is killed once during attribution and resumed as `make run` resumes it; what was on
    disk at each step is kept in `run.interruption` for the test of that. The killed run has the
    local profile's one GPU slot; the resumed run has as many as `make run` gives a machine
    without a GPU (GPU_SLOTS in the Makefile), so that its model jobs run side by side and the
    run takes half as long on 2 cores. Their outputs: `interrupted.log` and `resumed.log` in
    `run.work`.
    """
    work = run_folder(tmp_path_factory) / "tiny"
    run = TinyRun(work, work / "config.yaml", work / "results" / "tiny")
    record = work / "interruption.pickle"  # written last: the run is complete
    with open(work.parent / "tiny.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            shutil.rmtree(work, ignore_errors=True)  # what a failed attempt left
            write_config(work, TINY)
            run.interruption = kill_during_attribute(run)
            if run.interruption:
                # a killed Snakemake leaves its lock behind; a person would unlock once, rerun
                snakemake("--unlock", *run.args())
                run.interruption["plan"] = jobs(
                    snakemake("-n", "--rerun-incomplete", *run.args()).stdout)
            resumed = snakemake(*run.args(), "--resources", "gpu=1000", "--rerun-incomplete",
                                timeout=1800)
            (work / "resumed.log").write_text(resumed.stdout + resumed.stderr)
            snakemake("--configfile", str(run.configfile), "--directory", str(work),
                      "--report", str(run.results / "report.html"))
            record.write_bytes(pickle.dumps(run.interruption))
        run.interruption = pickle.loads(record.read_bytes())
    return run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> TinyRun:
    return shared_tiny_run(tmp_path_factory)


@pytest.mark.slow
def test_tiny_config_runs_end_to_end(tiny_run):
    results = tiny_run.results
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
        gathered = results / "attribution_summary" / f"{task}.json"
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
                 "benchmarks/token_mixing/{t}.tsv", "logs/adversarial_attention/{t}.log",
                 "interaction_scores/task={t}/part.parquet",
                 "interaction_methods/{t}/ground_truth.parquet",
                 "interaction_methods/{t}/deletion.parquet",
                 "interaction_methods/{t}/claims.parquet",
                 "interaction_methods/{t}/leaderboard.html",
                 "interaction_methods/{t}/ground_truth.png",
                 "interaction_methods/{t}/deletion.png"):
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
    # every method, flow included, scores every layer of the same (planted) examples
    scores = pd.read_parquet(results / "interaction_scores/task=pairs/part.parquet")
    per_method = scores.groupby("method")["idx"].nunique()
    assert len(per_method) == 10
    assert per_method.nunique() == 1 and 1 <= per_method.iloc[0] <= 3
    assert set(scores["layer"]) == {0, 1}
    truth = pd.read_parquet(results / "interaction_methods/pairs/ground_truth.parquet")
    assert set(truth["scope"]) == {"0", "1", "any"} and truth["hit_share"].between(0, 1).all()
    # the shards of all tasks read back as one dataset
    attributions = pd.read_parquet(results / "attributions")
    assert set(attributions["task"].astype(str)) == set(TINY["tasks"])


@pytest.mark.slow
def test_no_figure_check_warned_and_each_explorer_holds_the_sampled_examples(tiny_run):
    """Every figure of the run passed the figure checks (a failed one is a WARNING of logger
    attnlab.report.figures in its job's log); the explorer holds the examples the page shows and
    the first the interaction methods scored, with their maps, within the size
    docs/outputs.md states for the tiny run."""
    from test_explorer import embedded, stored

    logs = list((tiny_run.results / "logs").rglob("*.log"))
    assert any(log.parent.name == "example_views" for log in logs)  # the logs are there to read
    warned = [line for log in logs for line in log.read_text().splitlines()
              if "attnlab.report.figures" in line]
    assert warned == []
    for task in TINY["tasks"]:
        folder = tiny_run.results / "views" / task
        page = (folder / "explorer.html").read_text()
        data = embedded(page)
        shown = {int(p.stem.removeprefix("heatmap_")) for p in folder.glob("heatmap_*.png")}
        scores = pd.read_parquet(tiny_run.results / f"interaction_scores/task={task}/part.parquet")
        scored = int(scores["idx"].iloc[0])
        assert sorted(e["idx"] for e in data["examples"]) == sorted(shown | {scored})
        layers, heads = TINY["model"]["scratch"]["layers"], TINY["model"]["scratch"]["heads"]
        for example in data["examples"]:
            n = len(example["tokens"])
            assert list(example["maps"]) == ["attention", "effective attention", "attribution"]
            assert stored(example["maps"]["attribution"]).shape == (layers, heads * n * n)
            # attention rows sum to 1, to float16 precision
            attention = stored(example["maps"]["attention"]).reshape(layers, heads, n, n)
            np.testing.assert_allclose(attention.sum(axis=-1), 1, atol=n * 2.0**-11)
            methods = set(scores.loc[scores["idx"] == example["idx"], "method"])
            assert set(example["methods"]) == methods
        assert len(page.encode()) < 80_000


@pytest.mark.slow
def test_nothing_changed_plans_nothing(tiny_run):
    rerun = snakemake("-n", *tiny_run.args()).stdout
    assert "Nothing to be done" in rerun, rerun[-3000:]


def report_results(report: Path) -> dict[str, dict]:
    """The results a Snakemake HTML report embeds, by path (its `results` JSON object)."""
    page = report.read_text()
    start = re.search(r"var results = (\{)", page).start(1)
    return json.JSONDecoder().raw_decode(page[start:])[0]


@pytest.mark.slow
def test_report_holds_every_figure_the_claims_the_run_summary_and_the_figures_page(tiny_run):
    results = report_results(tiny_run.results / "report.html")
    # every figure the run drew, whichever stage drew it, with a caption; the per-example
    # views' heatmaps are embedded in their pages, which the report holds instead
    views = tiny_run.results / "views"
    figures = {path for path in results if path.endswith(".png")}
    assert figures == {str(p.relative_to(tiny_run.work)) for p in tiny_run.results.rglob("*.png")
                       if views not in p.parents}
    for path, result in results.items():
        assert result["caption"].strip(), f"{path} has no caption"
    pages = {Path(path).name: tiny_run.work / path for path in results if path.endswith(".html")}
    view_pages = {p.name for p in views.rglob("*.html")}
    assert view_pages and set(pages) == {"claims.html", "run_summary.html", "leaderboard.html",
                                         "figures.html", *view_pages}
    # the figures page: every figure with the caption the report gives it, written under it
    shown = pages["figures.html"].read_text()
    for path in figures:
        named = shown.index(f"<code>{path}</code>")
        assert shown.index(results[path]["caption"].strip(), named) == shown.index(
            "</code>", named) + len("</code>"), path
    assert sum(path.endswith("leaderboard.html") for path in results) == len(TINY["tasks"])

    claims = pages["claims.html"].read_text()
    tables = pd.concat([pd.read_parquet(p) for p in tiny_run.results.rglob("*claims.parquet")])
    assert len(tables)  # the check below is not vacuous
    for claim in tables.itertuples():
        assert f"<td>{claim.stage}</td>" in claims and f"<td>{claim.claim}</td>" in claims
    # the first page leads with the findings: the groups of the papers, their counts, and the
    # cross-task claims of scratch models on synthetic tasks marked not testable, with why
    page = (tiny_run.results / "report.html").read_text()
    findings = pd.read_parquet(tiny_run.results / "report" / "findings.parquet")
    assert len(findings) == len(tables)
    landing = (tiny_run.results / "report" / "landing.html").read_text()
    assert html.escape(findings_line(findings)) in landing
    for group in findings.loc[findings["kind"] == "finding", "group"].unique():
        assert json.dumps(f"<h3>{html.escape(group)}:")[1:-1] in page, group
    cross = findings[findings["stage"] == "task_correlation"]
    assert set(cross["verdict"]) == {"not testable"}
    assert all("synthetic tasks (pairs, single) share no words" in r for r in cross["reason"])
    summary = pages["run_summary.html"].read_text()
    for stage in (tiny_run.results / "benchmarks").iterdir():
        assert f"<td>{stage.name.removesuffix('.tsv')}</td>" in summary, stage.name
    assert "cpu (1 threads)" in summary and "name: tiny" in summary


@pytest.mark.slow
def test_every_finding_has_its_interval_bar_and_source_and_a_verdict_that_follows(tiny_run):
    """Issue 42's acceptance on the run's claims tables: a finding has its estimate, interval,
    n, bar, source and one of the four verdicts, and the verdict is the one its interval and bar
    give (an interval that contains the bar is inconclusive, whatever the estimate); one that
    is not testable says why; every other row is a check. The report counts the findings only
    and lists the checks apart."""
    findings = assert_verdicts_follow(tiny_run.results)
    table = pd.read_parquet(tiny_run.results / "report" / "findings.parquet")
    assert sum(counts(table).values()) == len(findings)
    page = (tiny_run.results / "report" / "claims.html").read_text()
    assert "<h2>Checks (not counted as findings)</h2>" in page


def assert_verdicts_follow(results: Path) -> pd.DataFrame:
    """Every finding of every stage's claims table under `results` has its estimate, interval,
    n, bar, source and one of the four verdicts, the one its interval and bar give, and a judged
    one an interval with a width (issue 58); one that is not testable says why. Returns the
    findings."""
    paths = [p for p in results.rglob("*claims.parquet") if "report" not in p.parts]
    claims = pd.concat([pd.read_parquet(p).assign(path=str(p.relative_to(results)))
                        for p in paths], ignore_index=True)
    assert set(claims["kind"]) <= set(KINDS)
    findings = claims[claims["kind"] == "finding"]
    assert len(findings)  # the checks below are not vacuous
    wrong = []
    for row in findings.itertuples():
        bar_known = not pd.isna(row.bar) and row.side in SIDES and bool(row.source)
        if row.verdict == UNTESTABLE:
            ok = bar_known and bool(row.reason)
        else:
            interval = Interval(row.value, row.low, row.high, row.n)
            ok = (bar_known and not pd.isna([row.value, row.low, row.high, row.n]).any()
                  and row.low < row.high
                  and row.verdict == verdict(interval, Bar(row.bar, row.side)))
        if not ok:
            wrong.append(f"{row.path}: {row.claim} ({row.verdict}, [{row.low}, {row.high}], "
                         f"bar {row.bar} {row.side}, source {row.source!r})")
    assert not wrong, "\n".join(wrong)
    assert claims["verdict"].isin(VERDICTS).all()
    return findings


@pytest.mark.slow
def test_the_results_page_is_generated_from_a_run_s_files(tiny_run, tmp_path):
    generator = [sys.executable, str(ROOT / "docs" / "generate_results.py"),
                 str(tiny_run.results), "--out", str(tmp_path / "results.md")]
    subprocess.run(generator, check=True, env=ENV)
    text = (tmp_path / "results.md").read_text()
    for task in TINY["tasks"]:
        metrics = json.loads((tiny_run.results / "finetune" / task / "metrics.json").read_text())
        assert f"| {task} | {metrics['n_train']:,} | {metrics['epochs']} of " in text
        assert f"`{metrics['code_version']}`" in text
    findings = pd.read_parquet(tiny_run.results / "report" / "findings.parquet")
    assert findings_line(findings) in text
    # the findings only: the checks are counted in one line
    for claim in findings.loc[findings["kind"] == "finding", "claim"]:
        assert claim.replace("|", "\\|") in text, claim
    assert checks_line(findings) in text
    # --check: the page is the run's; a hand edit is caught
    assert subprocess.run([*generator, "--check"], env=ENV).returncode == 0
    (tmp_path / "results.md").write_text(text.replace(" holds", " hold"))
    assert subprocess.run([*generator, "--check"], env=ENV, capture_output=True).returncode == 1
    # --snapshot: the page written from the copy of the files it reads is the run's page (but
    # for the command in its header); the copy is kilobytes, no model and no dump
    kept = tmp_path / "data" / "tiny"
    subprocess.run([*generator, "--snapshot", str(kept)], check=True, env=ENV)
    again = (tmp_path / "results.md").read_text()
    assert drop_command(again) == drop_command(text) and again != text
    files = [p for p in kept.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} == {".json", ".parquet", ".tsv"}
    assert not [p for p in files if p.name.startswith(".")]  # no provenance records
    assert sum(p.stat().st_size for p in files) < 2**20


def drop_command(page: str) -> str:
    """A results page without the lines of the command that writes it."""
    return "\n".join(line for line in page.splitlines() if "generate_results.py" not in line)


@pytest.mark.slow
def test_the_results_page_of_a_run_over_seeds_shows_every_seed_and_judges_over_them(
        tiny_run, tmp_path):
    """The tiny run's files as two seeds of a run over seeds (seed=0/, seed=1/): the page lists
    both seeds' models and judges every finding over the two, as the claims page does."""
    run = tmp_path / "results" / "twice"
    for seed in (0, 1):
        shutil.copytree(tiny_run.results, run / f"seed={seed}",
                        ignore=shutil.ignore_patterns("report", "report.html"))
    subprocess.run([sys.executable, str(ROOT / "docs" / "generate_results.py"), str(run),
                    "--out", str(tmp_path / "twice.md")], check=True, env=ENV)
    text = (tmp_path / "twice.md").read_text()
    assert "over 2 training seeds (0, 1" in text
    for seed in (0, 1):
        for task in TINY["tasks"]:
            metrics = json.loads((run / f"seed={seed}" / "finetune" / task / "metrics.json")
                                 .read_text())
            assert f"| {seed} | {task} | {metrics['n_train']:,} | " in text
    # the same numbers on both seeds: every finding testable on the tiny run is judged on 2
    # seeds, and holds in 2 of 2 or in none
    judged = re.findall(r"holds in (\d) of (\d) seeds", text)
    assert judged and {n for _, n in judged} == {"2"} and {k for k, _ in judged} <= {"0", "2"}
    # each interaction method once in each model's leaderboard (the mean of the seeds' means)
    for board in text.split("model** (")[1:]:
        methods = re.findall(r"^\| `(\w+)` \|", board.split("\n\n", 2)[1], re.M)
        assert methods and len(methods) == len(set(methods)), board


@pytest.mark.slow
def test_an_interrupted_run_resumes_keeping_finished_shards(tiny_run):
    interruption = tiny_run.interruption
    assert interruption, "the run ended before an attribute job could be caught running"
    planned = {(w["task"], w["shard"]) for rule, _, w in interruption["plan"]
               if rule == "attribute"}
    # a killed job may have left files under their final names, but never a half-written one
    # (at most a hidden temporary); and its shard is attributed again all the same
    assert all(interruption["left_by_killed"].values()), interruption["left_by_killed"]
    assert interruption["running"] <= planned
    # a finished shard is neither planned again nor rewritten
    assert not interruption["finished"] & planned
    for path, mtime in interruption["finished_files"].items():
        assert path.stat().st_mtime_ns == mtime, path
    assert not [p for p in tiny_run.results.rglob("*") if ".partial-" in p.name]


def merged(base: dict, change: dict) -> dict:
    """`base` with the values of `change` put in, nested dictionaries merged key by key."""
    out = copy.deepcopy(base)
    for key, value in change.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


# The report's pages and the target rule follow every change (each below redraws a figure).
REPORT = {"run_summary": 1, "claims": 1, "figures": 1, "all": 1}
# Everything of one task from fine-tuning on, and the stages gathering all tasks.
FROM_FINETUNE = {"finetune": 1, "attribute": TINY["attribution"]["shards"],
                 "summarise_attributions": 1, "head_importance": 1, "prune_eval": 1,
                 "pruning_figures": 1, "task_correlation": 1, "quadrature_study": 1,
                 **dict.fromkeys(FROM_MODEL, 1), **REPORT}
# A change to the config -> the jobs it plans by rule, and the one task they are all of (None:
# any tasks). Each case is one dry run against the completed tiny run.
CHANGES = [
    pytest.param({"heads": {"prune_percents": [0, 50, 100]}},
                 {"prune_eval": len(TINY["tasks"]), "pruning_figures": 1, **REPORT}, None,
                 id="pruning grid"),
    pytest.param({"tasks": {"pairs": {"finetune": {"learning_rate": 5.0e-4}}}},
                 FROM_FINETUNE, "pairs", id="one task's learning rate"),
    pytest.param({"tasks": {"added": {
                      "source": "synthetic", "synthetic": {"kind": "pair2", "n_train": 48,
                                                           "n_dev": 12},
                      "text_fields": ["sentence1", "sentence2"],
                      "label_names": ["entailment", "not_entailment"]}}},
                 {"prepare_data": 1, **FROM_FINETUNE}, "added", id="a new task"),
    # only the trees use τ; the views embed the tree figures; the report gathers the claims
    pytest.param({"trees": {"tau": 0.3}},
                 {"trees": len(TINY["tasks"]), "example_views": len(TINY["tasks"]), **REPORT},
                 None, id="tau"),
]


@pytest.mark.slow
@pytest.mark.parametrize("change, expected, only_task", CHANGES)
def test_a_config_change_plans_only_what_depends_on_it(tiny_run, change, expected, only_task):
    configfile = write_config(tiny_run.work, merged(TINY, change), "changed.yaml")
    planned = jobs(snakemake("-n", *tiny_run.args(configfile)).stdout)
    assert {rule: sum(r == rule for r, _, _ in planned) for rule, _, _ in planned} == expected
    if only_task:
        assert {w["task"] for _, _, w in planned if "task" in w} == {only_task}


RTE_TASK = {
    "source": "hub",
    "hub": {"path": "nyu-mll/glue", "name": "rte"},
    "text_fields": ["sentence1", "sentence2"],
    "label_names": ["entailment", "not_entailment"],
}


@pytest.mark.slow
def test_without_network_each_fetch_fails_in_one_line_and_writes_nothing(tmp_path):
    config = {"name": "offline", "tasks": {"rte": RTE_TASK},
              "model": {"source": "pretrained", "pretrained": "bert-base-cased"}}
    configfile = write_config(tmp_path, config)
    result = snakemake("--cores", "1", "--keep-going", "--configfile", str(configfile),
                       "--directory", str(tmp_path), check=False)
    assert result.returncode != 0
    lines = (result.stdout + result.stderr).splitlines()
    for what, way_out in [
        ("dataset nyu-mll/glue (rte), split train",
         "copy that split as Parquet to resources/datasets/nyu-mll/glue/rte/train.parquet"),
        ("dataset nyu-mll/glue (rte), split validation", "give the task a `local` source"),
        ("model bert-base-cased", "set model.pretrained to that directory"),
    ]:
        assert any(f"could not fetch {what}" in line and way_out in line for line in lines), what
    resources = tmp_path / "resources"
    assert not [p for p in resources.rglob("*") if p.is_file() and "logs" not in p.parts]


def save_tiny_bert(path: Path, words: list[str]) -> None:
    """A tiny BERT checkpoint and its tokenizer, written as save_pretrained does for any model."""
    tokenizer = build_tokenizer(words)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


@pytest.mark.slow
def test_hub_data_and_a_local_checkpoint_reach_finetuning_offline(tmp_path):
    # A folder laid out like the hub's nyu-mll/glue stands in for the hub (datasets reads both
    # alike); the model is a local directory written by save_pretrained.
    train, dev = glue_like(16), glue_like(6, offset=50)
    write_hub_folder(tmp_path / "glue_copy", {"train": train, "validation": dev})
    words = sorted({w.strip(".").lower() for text in pd.concat([train, dev])[
        ["sentence1", "sentence2"]].to_numpy().ravel() for w in text.split()})
    save_tiny_bert(tmp_path / "tiny_bert", words)
    config = {"name": "local", "device": "cpu",
              "tasks": {"rte": {**RTE_TASK, "hub": {"path": "glue_copy", "name": "rte"}}},
              "model": {"source": "pretrained", "pretrained": "tiny_bert", "max_length": 64},
              "finetune": {"epochs": 1, "batch_size": 8},
              # samples the 6 dev rows hold: the dry run checks them once they are downloaded
              "heads": {"importance_examples": 3, "min_evaluation_examples": 3}}
    configfile = write_config(tmp_path, config)
    metrics = "results/local/finetune/rte/metrics.json"
    snakemake("--cores", "1", "--configfile", str(configfile), "--directory", str(tmp_path),
              metrics, env={"HF_DATASETS_CACHE": str(tmp_path / "cache")}, timeout=900)

    fetched = tmp_path / "resources" / "datasets" / "glue_copy" / "rte"
    pd.testing.assert_frame_equal(pd.read_parquet(fetched / "validation.parquet"), dev)
    summary = json.loads((tmp_path / "results/local/data/rte/summary.json").read_text())
    assert summary["train"]["rows"] == 16 and summary["dev"]["rows"] == 6
    result = json.loads((tmp_path / metrics).read_text())
    assert result["n_train"] == 16 and result["n_dev"] == 6
    assert result["params"]["model"]["pretrained"] == "tiny_bert"
    # the download is not redone: every rule after it reads the local files
    assert "Nothing to be done" in snakemake(
        "-n", "--cores", "1", "--configfile", str(configfile), "--directory", str(tmp_path),
        metrics).stdout
