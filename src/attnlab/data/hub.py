"""Fetching datasets and checkpoints from the Hugging Face hub into local files, once.

Only the workflow's download rules call this module: every other stage reads the local copies,
so a cluster's compute nodes need no network. Without network, a fetch fails with one line
naming what could not be fetched and how to provide it locally (`FetchError`).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import datasets
from huggingface_hub import snapshot_download

from attnlab.plumbing.errors import AttnlabError, ConfigError
from attnlab.plumbing.outputs import atomic_path
from attnlab.plumbing.preflight import checkpoint_shape

log = logging.getLogger(__name__)

# The files of a checkpoint that transformers reads: configuration, tokenizer, PyTorch weights
# (not the TensorFlow, Flax, ONNX or Core ML copies many repositories also hold).
CHECKPOINT_FILES = ["*.json", "*.txt", "*.model", "*.safetensors"]
# Older repositories publish only pickled PyTorch weights.
LEGACY_WEIGHTS = ["pytorch_model*.bin"]


class FetchError(AttnlabError, RuntimeError):
    """Something could not be fetched from the hub; the message is one line."""


def _cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def fetch_dataset_split(path: str, *, name: str | None, split: str, out: str | os.PathLike) -> int:
    """Download one split of a hub dataset (`path`, configuration `name`) to Parquet at `out`.

    Returns the number of rows.
    """
    what = f"dataset {path}" + (f" ({name})" if name else "") + f", split {split}"
    try:
        frame = datasets.load_dataset(path, name, split=split).to_pandas()
    except Exception as err:  # the hub fails in many ways; all mean "not available here"
        raise FetchError(
            f"could not fetch {what} from the Hugging Face hub ({_cause(err)}); without "
            f"network, copy that split as Parquet to {out}, or give the task a `local` source"
        ) from None
    with atomic_path(out) as tmp:
        frame.to_parquet(tmp, engine="pyarrow", compression="zstd", index=False)
    log.info("%s: %d rows -> %s", what, len(frame), out)
    return len(frame)


def fetch_checkpoint(model_id: str, out_dir: str | os.PathLike) -> list[str]:
    """Download the configuration, tokenizer and weights of hub model `model_id` to `out_dir`,
    as published. Returns the names of the files."""
    try:
        with atomic_path(out_dir) as tmp:
            snapshot_download(model_id, local_dir=tmp, allow_patterns=CHECKPOINT_FILES)
            if not list(tmp.glob("*.safetensors")):
                snapshot_download(model_id, local_dir=tmp, allow_patterns=LEGACY_WEIGHTS)
            if not list(tmp.glob("*.safetensors")) + list(tmp.glob("*.bin")):
                raise FileNotFoundError("the repository has no PyTorch weights")
            # the download's own bookkeeping is not part of the checkpoint
            shutil.rmtree(tmp / ".cache", ignore_errors=True)
    except Exception as err:
        raise FetchError(
            f"could not fetch model {model_id} from the Hugging Face hub ({_cause(err)}); "
            f"without network, save it elsewhere (e.g. `hf download {model_id} --local-dir "
            "DIR`) and set model.pretrained to that directory"
        ) from None
    try:  # the first job that can see the model's family refuses one it cannot analyse
        checkpoint_shape(out_dir)
    except ConfigError:
        shutil.rmtree(out_dir)
        raise
    files = sorted(p.name for p in Path(out_dir).iterdir())
    log.info("model %s: %s -> %s", model_id, ", ".join(files), out_dir)
    return files

