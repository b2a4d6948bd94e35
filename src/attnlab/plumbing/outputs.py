"""Writing outputs safely and recording where they came from.

Every file a stage writes goes through `atomic_path`: it is written under a temporary
name in the same folder and renamed into place only when complete, so an interrupted job
never leaves a file that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from attnlab.plumbing.code_version import code_version
from attnlab.plumbing.errors import CorruptFileError, one_line_errors

TRACKED_PACKAGES = (
    "attnlab", "torch", "transformers", "datasets", "pandas", "pyarrow", "snakemake"
)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of `path`; rename it to `path` only if the block succeeds.

    Temporaries that a killed process left for the same `path` are removed first.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{final.name}.partial-"
    for stale in final.parent.iterdir():
        if stale.name.startswith(prefix):
            _remove(stale)
    tmp = final.with_name(f"{prefix}{os.getpid()}")
    try:
        yield tmp
        _remove(final)
        os.replace(tmp, final)
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _strict(obj: Any) -> Any:
    """`obj` with NaN and infinite floats as None: strict JSON has no NaN."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: _strict(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(value) for value in obj]
    return obj


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented strict JSON (NaN as null), atomically."""
    text = json.dumps(_strict(obj), indent=2, sort_keys=True, default=str, allow_nan=False)
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n")


def write_table(df: pd.DataFrame, path: str | os.PathLike, meta: dict[str, Any]) -> None:
    """Write a table to zstd Parquet atomically, with `meta` (provenance) under `attnlab`."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), b"attnlab": json.dumps(meta, default=str).encode()}
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def write_task_tables(
    task: str,
    tables: dict[str, pd.DataFrame],
    out: dict[str, str | os.PathLike],
    provenance: dict[str, Any],
) -> None:
    """Write each of a task's tables to out[its name], with the task as its first column (added
    to the frame itself, so that what is drawn from it afterwards has the column too)."""
    for name, table in tables.items():
        table.insert(0, "task", task)
        write_table(table, out[name], provenance)


def provenance(params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Config values, code version and package versions an output came from."""
    versions = {}
    for package in TRACKED_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "params": params or {},
        "code_version": code_version(),
        "python": sys.version.split()[0],
        "packages": versions,
    }


def setup_logging(log_path: str | os.PathLike | None = None) -> logging.Logger:
    """Log to stderr and, when given, to a (Snakemake `log:`) file. Returns the attnlab logger."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    return logging.getLogger("attnlab")


def _record_path(path: Path) -> Path:
    """Where the size and checksum of the output `path` (a file or a folder) are recorded: a
    hidden sibling, which Parquet readers of a hive-partitioned folder skip."""
    return path.with_name(f".{path.name}.attnlab.json")


def _files(path: Path) -> dict[str, Path]:
    if path.is_dir():
        return {str(f.relative_to(path)): f for f in sorted(path.rglob("*")) if f.is_file()}
    return {path.name: path}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def record_outputs(paths: list[str | os.PathLike], rule: str) -> None:
    """Record the size and SHA-256 of each file of the finished outputs `paths` of `rule` (of a
    Parquet file also its rows: reading them back checks that the file is whole)."""
    for path in map(Path, paths):
        files = {}
        for name, file in _files(path).items():
            files[name] = {"bytes": file.stat().st_size, "sha256": _sha256(file)}
            if file.suffix == ".parquet":
                files[name]["rows"] = pq.read_metadata(file).num_rows
        write_json(_record_path(path), {"rule": rule, "files": files})


def verify_inputs(paths: list[str | os.PathLike]) -> None:
    """Refuse (`CorruptFileError`) an input that is not as the rule that wrote it recorded it:
    truncated, overwritten or with files missing. Inputs without a record (data files of the
    user, downloads) are not checked."""
    for path in map(Path, paths):
        record_path = _record_path(path)
        if not record_path.is_file():
            continue
        record = json.loads(record_path.read_text())
        found = _files(path)
        for name, expected in record["files"].items():
            file = found.get(name)
            if file is None:
                change = "is missing"
            elif file.stat().st_size != expected["bytes"]:
                change = f"is {file.stat().st_size} bytes, not the {expected['bytes']} written"
            elif _sha256(file) != expected["sha256"]:
                change = "has changed since it was written (another checksum)"
            else:
                continue
            rule = record["rule"]
            raise CorruptFileError(f"{path / name if path.is_dir() else path} {change} by rule "
                                   f"{rule}; rebuild it with: snakemake --forcerun {rule} "
                                   "(and your other options)")


@contextmanager
def workflow_job(smk: Any) -> Iterator[logging.Logger]:
    """What every workflow script runs its work in: logging to the job's log file; inputs
    verified against what wrote them and outputs recorded (`verify_inputs`, `record_outputs`:
    for this configuration's results/ only, the workflow's own files); an `AttnlabError` ending
    the job in one line (`attnlab.plumbing.errors`). `smk` is the script's `snakemake` object.
    Yields the attnlab logger."""
    log = setup_logging(smk.log[0])
    with one_line_errors():
        verify_inputs(list(smk.input))
        yield log
    record_outputs([path for path in smk.output if Path(path).parts[0] == "results"], smk.rule)
