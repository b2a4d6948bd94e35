"""Safe writes and the code versions that drive Snakemake reruns."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from attnlab.plumbing import code_version, outputs
from attnlab.plumbing.errors import CorruptFileError


def test_atomic_path_publishes_only_on_success(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError), outputs.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with outputs.atomic_path(target) as tmp:
        tmp.mkdir()  # directories (saved models) too
        (tmp / "config.json").write_text("{}")
    assert (target / "config.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_path_removes_what_a_killed_writer_left(tmp_path):
    target = tmp_path / "part.parquet"
    (tmp_path / ".part.parquet.partial-99999").write_text("half")  # a killed process's
    (tmp_path / ".part.parquet.partial-99998").mkdir()
    (tmp_path / ".other.parquet.partial-99999").write_text("another file's")
    with outputs.atomic_path(target) as tmp:
        tmp.write_text("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".other.parquet.partial-99999", "part.parquet"]


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    copy = tmp_path / "attnlab"
    shutil.copytree(code_version.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(code_version, "PACKAGE_DIR", copy)
    return copy


def test_code_version_follows_imports(package_copy):
    before = {m: code_version.code_version(m)
              for m in ("engine.dump_rows", "engine.attribution", "data.synthetic")}
    # attribution.py is imported by dump_rows.py, not by synthetic.py
    source = package_copy / "engine" / "attribution.py"
    source.write_text(source.read_text() + "\n# an edit\n")
    after = {m: code_version.code_version(m) for m in before}
    assert after["engine.attribution"] != before["engine.attribution"]
    assert after["engine.dump_rows"] != before["engine.dump_rows"]
    assert after["data.synthetic"] == before["data.synthetic"]


def test_code_version_of_unknown_module_fails(package_copy):
    with pytest.raises(ValueError, match="attnlab.nosuch"):
        code_version.code_version("nosuch")


def test_json_is_strict_with_nan_as_null(tmp_path):
    path = tmp_path / "summary.json"
    outputs.write_json(path, {"share": float("nan"), "rows": [1.0, float("inf")], "n": 3})
    assert json.loads(path.read_text(), parse_constant=pytest.fail) == {
        "share": None, "rows": [1.0, None], "n": 3}


def test_a_truncated_output_is_named_with_the_rule_that_wrote_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    table = Path("results/x/part.parquet")
    table.parent.mkdir(parents=True)
    pd.DataFrame({"a": range(100)}).to_parquet(table)
    outputs.record_outputs([str(table)], "attribute")
    outputs.verify_inputs([str(table)])  # as written
    table.write_bytes(table.read_bytes()[:-10])
    with pytest.raises(CorruptFileError, match=r"part.parquet is \d+ bytes, not the \d+ written "
                       r"by rule attribute; rebuild it with: snakemake --forcerun attribute"):
        outputs.verify_inputs([str(table)])
