"""Writing outputs safely and recording where they came from.

Every file a stage writes goes through `atomic_path`: it is written under a temporary
name in the same folder and renamed into place only when complete, so an interrupted job
never leaves a file that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
TRACKED_PACKAGES = (
    "attnlab", "torch", "transformers", "datasets", "pandas", "pyarrow", "snakemake"
)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of `path`; rename it to `path` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.partial-{os.getpid()}")
    _remove(tmp)
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


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def code_version(*modules: str) -> str:
    """A short hash of the library's source: of the named modules, or of the whole package.

    Snakemake cannot see edits inside an installed package, so stages pass this as a param
    and rerun when the code they run changes.
    """
    names = sorted(modules) if modules else sorted(
        p.stem for p in PACKAGE_DIR.glob("*.py")
    )
    digest = hashlib.sha256()
    for name in names:
        source = PACKAGE_DIR / f"{name}.py"
        if not source.exists():
            raise ValueError(f"code_version: no module attnlab.{name}")
        digest.update(name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:12]


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
