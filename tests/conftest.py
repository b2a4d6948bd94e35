"""Shared test fixtures. Everything runs offline, on CPU, with one thread."""

import os
from pathlib import Path

import pytest
import torch

# Before any test module imports transformers or datasets, which read it at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
# One thread: tiny models gain nothing from more, and two busy processes on two cores
# oversubscribed with more threads run many times slower.
torch.set_num_threads(1)

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
    return Path(__file__).resolve().parents[1] / "config.yaml"
