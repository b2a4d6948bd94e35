"""Safe writes and the code versions that drive Snakemake reruns."""

from __future__ import annotations

import shutil

import pytest

from attnlab import outputs


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
    shutil.copytree(outputs.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(outputs, "PACKAGE_DIR", copy)
    return copy


def test_code_version_follows_imports(package_copy):
    before = {m: outputs.code_version(m) for m in ("dumps", "attribution", "synthetic")}
    # attribution.py is imported by dumps.py, not by synthetic.py
    source = package_copy / "attribution.py"
    source.write_text(source.read_text() + "\n# an edit\n")
    after = {m: outputs.code_version(m) for m in before}
    assert after["attribution"] != before["attribution"]
    assert after["dumps"] != before["dumps"]
    assert after["synthetic"] == before["synthetic"]


def test_code_version_of_unknown_module_fails(package_copy):
    with pytest.raises(ValueError, match="attnlab.nosuch"):
        outputs.code_version("nosuch")
