"""The profiles in profiles/, through the real snakemake command line: what each job asks for.

A real SLURM run with profiles/slurm is in tests/cluster/.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_workflow import jobs_of, snakemake

ROOT = Path(__file__).resolve().parents[1]
LOCAL, SLURM = (yaml.safe_load((ROOT / "profiles" / name / "config.yaml").read_text())
                for name in ("local", "slurm"))


def planned(profile: str, *args: str) -> tuple[str, dict[tuple, dict[str, str]]]:
    """A dry run of every job of the default config with a profile of profiles/: its log, and
    each job's resources."""
    result = snakemake("-n", "--forceall", "--cores", "2", "--configfile", "config.yaml",
                       "--profile", f"profiles/{profile}", *args)
    output = result.stdout + result.stderr
    jobs = {(job.rule, job.fields.get("wildcards")): job.resources
            for job in jobs_of(output) if not job.local}
    return output, jobs


@pytest.fixture(scope="module")
def local_plan() -> tuple[str, dict[tuple, dict[str, str]]]:
    return planned("local")


def size(resources: dict) -> dict[str, str]:
    return {key: str(resources[key]) for key in ("mem_mb", "runtime")}


def slurm_size(rule: str) -> dict[str, str]:
    """mem_mb and runtime that profiles/slurm gives the jobs of a rule."""
    return size({**SLURM["default-resources"], **SLURM["set-resources"].get(rule, {})})


def wrong_size(rule: str) -> str:
    return (f"{rule}: a job's memory and time come from the profiles (profiles/slurm "
            "set-resources for a heavy rule), not from the rule's resources:")


def test_local_runs_size_every_job_with_the_local_profile(local_plan):
    output, jobs = local_plan
    assert "Using profile profiles/local for setting default command line arguments" in output
    for (rule, _), resources in jobs.items():
        assert size(resources) == size(LOCAL["default-resources"]), wrong_size(rule)


def test_slurm_profile_sizes_every_job_and_requests_gpus_as_the_rules_declare(local_plan):
    _, local = local_plan
    output, slurm = planned("slurm")
    # the only profile: no workflow profile adds the local gpu limit under it
    assert "Using profile profiles/slurm for setting default command line arguments" in output
    assert slurm.keys() == local.keys()
    # that the rules asking for a GPU are those whose jobs use a device is checked on SLURM
    assert {resources.get("gpu") for resources in local.values()} == {"1", None}
    for (rule, wildcards), resources in slurm.items():
        # the profile sizes jobs but never adds or drops a GPU: that is the rule's to declare
        assert resources.get("gpu") == local[rule, wildcards].get("gpu"), (rule, wildcards)
        assert size(resources) == slurm_size(rule), wrong_size(rule)


def test_a_cpu_config_requests_no_gpu_on_slurm():
    _, jobs = planned("slurm", "--config", "device=cpu")
    # gpu=0 adds nothing to the sbatch command line
    assert {resources.get("gpu") for resources in jobs.values()} == {"0", None}
