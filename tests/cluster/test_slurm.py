"""The workflow on a real single-node SLURM cluster through profiles/slurm, against a local run
(the tiny run of tests/test_workflow.py, made once per test session).

The cluster (tests/cluster/slurm.sh) is started for this test and stopped after it; it needs
root, for the Debian packages and the daemons. Its node declares two count-only GPUs, so rules
that ask for a GPU are submitted with a GPU request and scheduled, two at a time, and their jobs
fall back to the CPU (no GPU is visible to torch).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from safetensors.numpy import load_file
from test_profiles import slurm_size
from test_workflow import TINY, Job, jobs_of, shared_tiny_run, snakemake

SCRIPT = Path(__file__).with_name("slurm.sh")
# The tiny config with one of its tasks (and so no task pairs), which keeps every rule and the
# attribution shards: the GPU jobs share the cluster's two GPUs, each with ~7 s of Snakemake
# start-up. With the tiny config's device auto the rules that run a model ask for a GPU. The
# task's files equal those of the tiny run, which makes them alongside the other task's.
TASK = "pairs"
CONFIG = {**TINY, "tasks": {TASK: TINY["tasks"][TASK]},
          "heads": {key: value for key, value in TINY["heads"].items()
                    if key != "dissimilar_pairs"}}
# What this cluster needs on top of the profile. It keeps no accounting database, so job
# states come from squeue (the plugin reads sacct's failure as "still running" and would
# wait forever); and jobs are checked every 2 s instead of after 40 s and then every 10 s.
CI_OVERRIDES = ("--slurm-status-command", "squeue",
                "--slurm-init-seconds-before-status-checks", "2",
                "--seconds-between-status-checks", "2")
# Both runs execute the same code on the same CPU with one thread each and should agree to
# the last bit; the tolerance only admits float32 sums taken in another order (another SIMD
# path on another node), far below any difference the analyses interpret.
RTOL, ATOL = 1e-5, 1e-7


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the SLURM cluster test installs and starts SLURM daemons: run it as root")
    state = tmp_path_factory.mktemp("slurm")
    subprocess.run([SCRIPT, "start", state], check=True, timeout=600)
    try:
        yield state
    finally:
        subprocess.run([SCRIPT, "stop", state], check=True, timeout=120)


def slurm_jobs() -> dict[str, dict[str, str]]:
    """Every job the cluster knows (finished ones too, for MinJobAge), by its comment, which
    the plugin sets to the rule and wildcards."""
    fields = ("Comment", "State", "tres-per-job", "MinMemory", "TimeLimit")
    listing = subprocess.run(
        ["squeue", "--states=all", "--noheader", "-O", ",".join(f"{f}:200|" for f in fields)],
        check=True, capture_output=True, text=True,
    ).stdout
    jobs = {}
    for line in listing.splitlines():
        values = dict(zip(fields, (value.strip() for value in line.split("|")), strict=False))
        jobs[values.pop("Comment")] = values
    return jobs


def comment(job: Job) -> str:
    return f"rule_{job.rule}_wildcards_{'_'.join(job.wildcards.values())}"


def minutes(limit: str) -> float:
    """A SLURM time limit, [days-][hours:]minutes:seconds, in minutes."""
    days, _, clock = limit.rpartition("-")
    hours, mins, secs = ([0, 0, 0] + [int(part) for part in clock.split(":")])[-3:]
    return (int(days or 0) * 24 + hours) * 60 + mins + secs / 60


def gpu_jobs_at_once(output: str) -> int:
    """The most jobs asking for a GPU that a local run had running at the same time."""
    gpu_jobs = {job.fields["jobid"] for job in jobs_of(output) if job.resources.get("gpu") == "1"}
    running = most = 0
    for line in output.splitlines():
        if line.startswith("    jobid: ") and line.split(": ")[1] in gpu_jobs:
            running += 1
        elif line.startswith("Finished jobid: ") and line.split()[2] in gpu_jobs:
            running -= 1
        most = max(most, running)
    return most


def assert_tables_close(a: pa.Table, b: pa.Table, where: str) -> None:
    assert a.schema == b.schema, where
    for name in a.column_names:
        x, y = a[name].combine_chunks(), b[name].combine_chunks()
        if pa.types.is_list(x.type):
            assert x.value_lengths().equals(y.value_lengths()), f"{where}: {name}"
            x, y = x.flatten(), y.flatten()
        if pa.types.is_floating(x.type):
            np.testing.assert_allclose(x.to_numpy(zero_copy_only=False),
                                       y.to_numpy(zero_copy_only=False),
                                       rtol=RTOL, atol=ATOL, err_msg=f"{where}: {name}")
        else:
            assert x.equals(y), f"{where}: {name}"


def assert_json_close(a, b, where: str) -> None:
    if isinstance(a, dict):
        # run times differ by nature (seconds, seconds_per_example, seconds_vs_...)
        assert a.keys() == b.keys(), where
        for key in {key for key in a if "seconds" not in key}:
            assert_json_close(a[key], b[key], f"{where}: {key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for x, y in zip(a, b, strict=True):
            assert_json_close(x, y, where)
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL), (where, a, b)
    else:
        assert a == b, where


def of_task(path: Path, task: str) -> bool:
    """Whether a results file is one task's (data/<task>/, attributions/task=<task>/,
    attribution_summary/<task>.json and <task>_claims.parquet, ...) rather than the run's (the
    report, the figures and studies over all tasks)."""
    return (task in path.parts or f"task={task}" in path.parts
            or path.stem == task or path.stem.startswith(f"{task}_"))


def assert_same_results(a: Path, b: Path, task: str) -> None:
    """Every data file of run `a` that is task's equals run `b`'s: tables, model weights, JSON
    (figures are drawn from the tables; logs and benchmarks differ by nature, and so do the
    hidden integrity records, whose checksums cover files with run times in them). `b` may
    hold more tasks: the files of the whole run (the report, studies over all tasks) are only
    checked to be there."""
    kinds = (".parquet", ".safetensors", ".json")

    def data_files(run: Path) -> set[Path]:
        return {p.relative_to(run) for p in run.rglob("*")
                if p.suffix in kinds and not p.name.startswith(".")}

    files, others = data_files(a), data_files(b)
    assert files <= others, sorted(files - others)
    files = sorted(path for path in files if of_task(path, task))
    assert any(p.suffix == ".safetensors" for p in files)
    # (results/<name>/<stage>/...)
    assert {p.parts[1] for p in files} >= {"data", "finetune", "attributions", "heads"}
    for path in files:
        if path.suffix == ".parquet":
            assert_tables_close(pq.read_table(a / path), pq.read_table(b / path), str(path))
        elif path.suffix == ".safetensors":
            x, y = load_file(a / path), load_file(b / path)
            assert x.keys() == y.keys(), path
            for key in x:
                np.testing.assert_allclose(x[key], y[key], rtol=RTOL, atol=ATOL,
                                           err_msg=f"{path}: {key}")
        else:
            assert_json_close(json.loads((a / path).read_text()),
                              json.loads((b / path).read_text()), str(path))


@pytest.mark.slow
def test_slurm_run_submits_every_job_and_matches_a_local_run(slurm_cluster, tmp_path,
                                                            tmp_path_factory):
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(CONFIG))
    on_slurm = tmp_path / "slurm"
    # The local run is made (or waited for, where another worker makes it) while the cluster
    # runs: the cluster's jobs spend much of their time waiting on sbatch and squeue, the
    # local run's fill the cores meanwhile.
    with ThreadPoolExecutor(max_workers=1) as runs:
        cluster_run = runs.submit(
            snakemake, "--profile", "profiles/slurm", *CI_OVERRIDES, "--configfile",
            str(configfile), "--directory", str(on_slurm), timeout=1800)
        local = shared_tiny_run(tmp_path_factory)
        run = cluster_run.result()
    jobs = jobs_of(run.stdout + run.stderr)

    # every job but the target rule `all` (which runs nothing) went through sbatch and finished
    assert {job.rule for job in jobs if job.local} == {"all"}
    jobs = [job for job in jobs if not job.local]
    submitted = slurm_jobs()
    assert sorted(submitted) == sorted(map(comment, jobs))
    assert {job["State"] for job in submitted.values()} == {"COMPLETED"}

    # a job asks for a GPU exactly when it runs a model, i.e. picks a device (and it gets
    # one: SLURM sets CUDA_VISIBLE_DEVICES, torch sees no usable GPU, the job says so)
    uses_device = {}
    for job in jobs:
        log = (on_slurm / job.fields["log"].split(", ")[0]).read_text()
        uses_device[comment(job)] = "device:" in log
        if uses_device[comment(job)]:
            assert re.search(r"device: auto -> cpu \(no GPU visible, CUDA_VISIBLE_DEVICES=[01]\)",
                             log), log
    assert set(uses_device.values()) == {True, False}
    for job in jobs:
        request = submitted[comment(job)]
        gpu = "gres:gpu:1" if uses_device[comment(job)] else "N/A"
        assert request["tres-per-job"] == gpu, comment(job)
        # with the memory and time that the profile sizes the rule with
        size = slurm_size(job.rule)
        assert request["MinMemory"] == f"{size['mem_mb']}M", job.rule
        assert minutes(request["TimeLimit"]) == float(size["runtime"]), job.rule

    # the local profile lets one GPU job run at a time (the tiny run until it was killed),
    # unless make's GPU slots for a machine without a GPU are given (the tiny run resumed)
    assert gpu_jobs_at_once((local.work / "interrupted.log").read_text()) == 1
    assert gpu_jobs_at_once((local.work / "resumed.log").read_text()) == 2
    assert_same_results(on_slurm / "results", local.work / "results", TASK)
