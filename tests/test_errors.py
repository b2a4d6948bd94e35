"""Bad input gets one clear line, before any compute is spent, through the real snakemake
command line: no traceback, a non-zero exit, one line naming the key, file or column, and
nothing under results/ but logs."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest
from test_workflow import snakemake, write_config

from attnlab.errors import TRACEBACK_VARIABLE, ConfigError, one_line_errors

# A local single-sentence task: two small CSV files, written by `local_task`.
TRAIN_ROWS = [("a good film", 1), ("a bad film", 0), ("a fine film", 1), ("a dull film", 0)]
DEV_ROWS = [("a great film", 1), ("an awful film", 0)]


def write_csv(path: Path, rows: list[tuple], header: str = "review,sentiment") -> str:
    path.write_text("\n".join([header, *(",".join(map(str, row)) for row in rows)]) + "\n")
    return str(path)


def local_config(work: Path, train: list[tuple] = TRAIN_ROWS, dev: list[tuple] = DEV_ROWS,
                 **changes) -> dict:
    """A tiny config of one local task (reviews) read from CSV files written into `work`."""
    work.mkdir(parents=True, exist_ok=True)
    config = {
        "name": "bad",
        "device": "cpu",
        "tasks": {"reviews": {
            "source": "local",
            "local": {"train": write_csv(work / "train.csv", train),
                      "dev": write_csv(work / "dev.csv", dev)},
            "text_fields": ["review"], "label_field": "sentiment",
            "label_names": ["negative", "positive"]}},
        "model": {"scratch": {"layers": 1, "heads": 2, "hidden": 8, "intermediate": 8},
                  "max_length": 16},
        "finetune": {"epochs": 1, "batch_size": 2},
    }
    config.update(changes)
    return config


def run(work: Path, config: dict, *targets: str, dry: bool = False,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    configfile = write_config(work, config)
    return snakemake(*(["-n"] if dry else []), "--cores", "1", "--configfile", str(configfile),
                     "--directory", str(work), *targets, check=False, env=env)


def assert_one_line(result: subprocess.CompletedProcess, *expected: str) -> str:
    """A failure with no traceback and exactly one line holding every `expected` text."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if all(text in line for text in expected)]
    assert len(lines) == 1, output
    return lines[0]


def written(work: Path) -> list[Path]:
    """Files under results/ other than logs."""
    results = work / "results"
    return [p for p in results.rglob("*")
            if p.is_file() and "logs" not in p.relative_to(results).parts]


def test_a_library_error_ends_the_block_in_one_logged_line(caplog, monkeypatch):
    monkeypatch.delenv(TRACEBACK_VARIABLE, raising=False)
    with caplog.at_level(logging.ERROR, "attnlab"), pytest.raises(SystemExit) as exit_:
        with one_line_errors():
            raise ConfigError("trees.tau: 2 is out of range\n(allowed: > 0 and < 1)")
    assert exit_.value.code == 1
    assert caplog.messages == ["trees.tau: 2 is out of range (allowed: > 0 and < 1)"]


def test_the_traceback_is_shown_on_request_and_for_bugs(monkeypatch):
    monkeypatch.setenv(TRACEBACK_VARIABLE, "1")
    with pytest.raises(ConfigError), one_line_errors():
        raise ConfigError("x")
    monkeypatch.delenv(TRACEBACK_VARIABLE)
    with pytest.raises(KeyError), one_line_errors():
        raise KeyError("a bug keeps its traceback")


PREPARED = "results/bad/data/reviews/train.parquet"


@pytest.mark.slow
@pytest.mark.parametrize("dev, expected", [
    pytest.param([("a great film", 2)], ("dev.csv", "column 'sentiment' row 0 has label 2"),
                 id="label out of range"),
    pytest.param([("a great film", "x")], ("dev.csv", "column 'sentiment' row 0"),
                 id="label not a number"),
])
def test_a_data_error_in_a_job_is_one_line_in_the_output_and_the_log(tmp_path, dev, expected):
    config = local_config(tmp_path, dev=dev)
    line = assert_one_line(run(tmp_path, config, PREPARED), *expected)
    assert "ERROR" in line
    log = (tmp_path / "results/bad/logs/prepare_data/reviews.log").read_text()
    assert sum(all(text in row for text in expected) for row in log.splitlines()) == 1
    assert written(tmp_path) == []
    # on request, the same error with its traceback
    shown = run(tmp_path, config, PREPARED, env={TRACEBACK_VARIABLE: "1"})
    assert shown.returncode != 0 and "Traceback" in shown.stderr
