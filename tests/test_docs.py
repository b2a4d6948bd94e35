"""The documentation: the generated configuration and results pages are current, the README
stays short and its Quick start keeps its two commands, no page cites internal material, every
relative link resolves."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnlab.methods.registry import METHODS
from attnlab.plumbing.config import load_schema

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
# Generated from src/attnlab/plumbing/config.schema.yaml by docs/generate_configuration.py.
GENERATED = ROOT / "docs" / "configuration.md"


def _generator(name: str = "generate_configuration"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_page_is_current():
    generator = _generator()
    text, _ = generator.generate(load_schema())
    assert GENERATED.read_text(encoding="utf-8") == text, (
        "docs/configuration.md is stale: run python docs/generate_configuration.py")


def test_methods_table_is_current():
    """docs/interaction_methods.md's table of the methods is what docs/generate_configuration.py
    writes from the registry: one row per method, in the registry's order."""
    generator = _generator()
    page = generator.METHODS_PAGE.read_text(encoding="utf-8")
    assert generator.with_methods_table(page) == page, (
        "docs/interaction_methods.md's methods table is stale: run python "
        "docs/generate_configuration.py")
    rows = [line.split(" | ")[0] for line in generator.methods_table().splitlines()
            if line.startswith("| `")]
    assert rows == [f"| `{method.name}`" for method in METHODS]


@pytest.mark.parametrize(("snapshot", "page"), [("default", "results.md"),
                                                ("smollm2", "decoders.md"),
                                                ("real", "real.md")])
def test_results_page_is_its_snapshots_page(snapshot, page):
    """docs/results.md, docs/real.md's five-seed run and the SmolLM2 run's section of
    docs/decoders.md are what
    docs/generate_results.py writes from the run files kept in docs/data/<name>/ (the numbers
    of the page trace to files in the repository)."""
    check = subprocess.run([sys.executable, str(ROOT / "docs" / "generate_results.py"),
                            str(ROOT / "docs" / "data" / snapshot), "--check",
                            "--out", str(ROOT / "docs" / page)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def _correlations(folder: Path, *, seed: int, other_seed: bool) -> None:
    """heads/task_correlation.parquet of a run of two tasks and a shuffled-label one, as the
    rule writes it, from seeded importance (the next seed's: another draw of the same)."""
    import numpy as np
    import pandas as pd

    from attnlab.analyses.task_correlation import task_correlations

    def importance(draw: int) -> pd.DataFrame:
        values = np.random.default_rng(draw).random((12, 3))
        index = pd.MultiIndex.from_product([range(3), range(4)], names=["layer", "head"])
        return pd.DataFrame(values, index=index, columns=["rt", "imdb", "rt_shuffled"])

    (folder / "heads").mkdir(parents=True)
    task_correlations(importance(seed), importance(seed + 1) if other_seed else None,
                      seed=seed, shuffled=["rt_shuffled"]).to_parquet(
        folder / "heads" / "task_correlation.parquet")


def test_the_task_correlations_show_each_seed_s_ceiling_beside_the_floors(tmp_path):
    """Fig. 5's section: a row per pair and per task's floor and ceiling, a column per seed;
    a one-seed run's ceiling is "—" with the reason; a run without the file has no section."""
    results = _generator("generate_results")
    runs = {seed: tmp_path / f"seed={seed}" for seed in (0, 1)}
    for seed, folder in runs.items():
        _correlations(folder, seed=seed, other_seed=True)
    rows = [line for line in results._task_correlation(runs).splitlines()
            if line.startswith("| ")]
    assert rows[0] == "| r of | tasks | seed 0 | seed 1 |"
    ceilings = [row for row in rows if row.startswith("| itself at the next seed (ceiling)")]
    assert [row.split(" | ")[1] for row in ceilings] == ["rt", "imdb", "rt_shuffled"]
    assert all("—" not in row and "[" in row for row in ceilings)  # r with its interval
    # the header; 3 pairs (2 of them with the shuffled-label task); 3 permuted, 3 ceilings
    assert len(rows) == 1 + 3 + 3 + 3
    one = {None: tmp_path / "one"}
    _correlations(one[None], seed=0, other_seed=False)
    section = results._task_correlation(one)
    assert "| itself at the next seed (ceiling) | rt | — |" in section
    assert "—: one seed: no second fine-tuning" in section
    assert results._task_correlation({None: tmp_path / "none"}) == ""


def test_a_generated_block_replaces_only_the_text_between_its_markers():
    results = _generator("generate_results")
    page = (f"# Decoders\n\nProse.\n\n## SmolLM2\n\nMore prose.\n{results.BEGIN}\nold\n"
            f"{results.END}\n\n## After\n")
    placed = results.placed("# What the run finds\n\ntext\n\n## The models\n\nrows", page)
    # the page's own text stays; the block's headings sit below the section it is in (##)
    assert placed == (f"# Decoders\n\nProse.\n\n## SmolLM2\n\nMore prose.\n{results.BEGIN}\n"
                      "### What the run finds\n\ntext\n\n#### The models\n\nrows\n"
                      f"{results.END}\n\n## After\n")
    assert results.placed(placed, page) != placed  # written again: the same block, once
    assert results.placed("# Whole\n", "# an old page\n") == "# Whole\n"


def test_every_schema_key_has_a_description():
    generator = _generator()
    _, missing = generator.generate(load_schema())
    assert missing == []


def test_configuration_page_lists_every_default_key():
    # every key of the default configuration has its row
    text = GENERATED.read_text(encoding="utf-8")
    config = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))

    def paths(node, prefix):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            if prefix == "tasks":
                path = "tasks.<task>"
            yield path
            if isinstance(value, dict):
                yield from paths(value, path)

    for path in paths(config, ""):
        assert f"| `{path}` |" in text, path


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section '## {title}'"
    return match.group(1)


def _code_lines(section: str) -> list[str]:
    """The command lines of a section: indented code blocks and fenced blocks."""
    lines, fenced = [], False
    for line in section.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith("    "):
            if line.strip():
                lines.append(line.strip())
    return lines


def test_quick_start_holds_exactly_the_two_commands():
    section = _section(README.read_text(encoding="utf-8"), "Quick start")
    assert _code_lines(section) == ["make run", "make test"]


# Internal material nothing in the repository may cite: the notes and seed documents the project
# was started from (papers and posters are cited by their authors and year instead).
FORBIDDEN = re.compile(r"poster \d|/shared/|(?<![a-z_])seeds/|notes/|methods\.md §", re.I)
TEXT_SUFFIXES = {".md", ".py", ".smk", ".yaml", ".rst", ".toml", ".cfg", ""}
CHECKED = [README, ROOT / "config.yaml", ROOT / "Snakefile", ROOT / "Makefile",
           ROOT / "results" / "README.md",
           *(path for folder in ("docs", "src", "workflow", "config", "tests", "benchmarks",
                                 "profiles", "envs")
             for path in sorted((ROOT / folder).rglob("*"))
             if path.is_file() and path.suffix in TEXT_SUFFIXES and path.name != "test_docs.py"
             and not {"__pycache__", "attnlab.egg-info"} & set(path.parts))]


def test_nothing_cites_internal_material():
    hits = [f"{page.relative_to(ROOT)}:{n}: {line.strip()}" for page in CHECKED
            for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            if FORBIDDEN.search(line)]
    assert hits == []


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page."""
    seen: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6} (.*)", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"`[^`\n]*`", "", text)  # links inside code spans are not links
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert broken == []
