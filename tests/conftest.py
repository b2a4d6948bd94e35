"""Shared test fixtures. Everything runs offline, on CPU, with one thread."""

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from snakemake.utils import validate

# Before any test module imports transformers or datasets, which read it at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
# One thread: tiny models gain nothing from more, and two busy processes on two cores
# oversubscribed with more threads run many times slower.
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]

PAIR_TASK = {
    "source": "synthetic",
    "synthetic": {"kind": "pair3", "n_train": 200, "n_dev": 60},
    "text_fields": ["premise", "hypothesis"],
    "label_names": ["entailment", "neutral", "contradiction"],
}
SINGLE_TASK = {
    "source": "synthetic",
    "synthetic": {"kind": "single2", "n_train": 200, "n_dev": 60},
    "text_fields": ["sentence"],
    "label_names": ["negative", "positive"],
}


@pytest.fixture(scope="session")
def tokenizer():
    """The word-level tokenizer over the synthetic vocabulary."""
    from attnlab import synthetic
    from attnlab.training import build_tokenizer

    return build_tokenizer(synthetic.vocabulary())


@pytest.fixture
def pair_task() -> dict:
    """Config entry of a small two-segment synthetic task (a fresh copy per test)."""
    return {**PAIR_TASK, "synthetic": dict(PAIR_TASK["synthetic"])}


@pytest.fixture
def single_task() -> dict:
    """Config entry of a small one-segment synthetic task (a fresh copy per test)."""
    return {**SINGLE_TASK, "synthetic": dict(SINGLE_TASK["synthetic"])}


@pytest.fixture
def config_path() -> Path:
    """The default config.yaml of the repository."""
    return ROOT / "config.yaml"


# config.yaml as the workflow reads it: with the schema's defaults filled in
DEFAULT_CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
validate(DEFAULT_CONFIG, str(ROOT / "workflow/schemas/config.schema.yaml"), set_default=True)


@pytest.fixture(scope="session")
def default_task_model(tmp_path_factory) -> Callable[[str], tuple[Path, dict]]:
    """Trains a task of config.yaml exactly as `make run` does (same config values and seed),
    once per session: task name -> (folder with train/dev.parquet and model/, metrics)."""
    # imported here, after HF_HUB_OFFLINE is set above
    from attnlab.tasks import TaskSpec, prepare_task
    from attnlab.training import finetune

    trained: dict[str, tuple[Path, dict]] = {}

    def train(name: str) -> tuple[Path, dict]:
        if name not in trained:
            task = DEFAULT_CONFIG["tasks"][name]
            folder = tmp_path_factory.mktemp(name)
            seed = DEFAULT_CONFIG["seed"]
            prepare_task(name, task, seed, folder / "train.parquet", folder / "dev.parquet")
            metrics = finetune(
                folder / "train.parquet", folder / "dev.parquet", TaskSpec.from_config(name, task),
                {"truncate": False, **DEFAULT_CONFIG["model"]},
                {**DEFAULT_CONFIG["finetune"], **task.get("finetune", {})},
                torch.device("cpu"), seed, folder / "model",
            )
            trained[name] = folder, metrics
        return trained[name]

    return train
