"""Fetching from the hub, offline: a local folder in the hub's dataset layout stands in for the
hub (datasets.load_dataset reads both alike), and a real hub id fails in one line."""

from __future__ import annotations

from pathlib import Path

import datasets
import pandas as pd
import pytest

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
    assert fetch_dataset_split(str(folder), name="rte", split="validation", out=out) == 3
    pd.testing.assert_frame_equal(pd.read_parquet(out), glue_like(3))
    assert [p.name for p in out.parent.iterdir()] == ["validation.parquet"]


def test_no_network_is_one_line_naming_the_split_and_the_way_out(tmp_path):
    out = tmp_path / "resources" / "train.parquet"
    with pytest.raises(FetchError) as info:
        fetch_dataset_split("nyu-mll/glue", name="rte", split="train", out=out)
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
    fetched = (tmp_path / "train.parquet", tmp_path / "validation.parquet")
    glue_like(8).to_parquet(fetched[0])
    glue_like(4, offset=100).to_parquet(fetched[1])
    out = tmp_path / "out"
    summary = prepare_task("rte", RTE, 0, out / "train.parquet", out / "dev.parquet", fetched)
    assert summary["train"]["rows"] == 8 and summary["dev"]["rows"] == 4
    pd.testing.assert_frame_equal(pd.read_parquet(out / "dev.parquet"), glue_like(4, 100))
