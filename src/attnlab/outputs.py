"""Writing outputs safely and recording where they came from.

Every file a stage writes goes through `atomic_path`: it is written under a temporary
name in the same folder and renamed into place only when complete, so an interrupted job
never leaves a file that looks finished.
"""

from __future__ import annotations

import ast
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

from attnlab.errors import one_line_errors

PACKAGE_DIR = Path(__file__).resolve().parent
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


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def _attnlab_imports(module: str) -> set[str]:
    """The attnlab modules that `module` imports directly."""
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "attnlab":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlab."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("attnlab."))
    return {name for name in found if (PACKAGE_DIR / f"{name}.py").exists()}


def code_version(*modules: str) -> str:
    """A short hash of the source of the named library modules and every attnlab module they
    import, directly or not (of the whole package when none is named).

    Snakemake cannot see edits inside a package, so each rule passes this as a param and
    reruns when the code it runs changes, and only then.
    """
    todo = list(modules) or [p.stem for p in PACKAGE_DIR.glob("*.py")]
    closure: set[str] = set()
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        if not (PACKAGE_DIR / f"{name}.py").exists():
            raise ValueError(f"code_version: no module attnlab.{name}")
        closure.add(name)
        todo.extend(_attnlab_imports(name))
    digest = hashlib.sha256()
    for name in sorted(closure):
        digest.update(name.encode() + b"\0" + (PACKAGE_DIR / f"{name}.py").read_bytes())
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


@contextmanager
def workflow_job(smk: Any) -> Iterator[logging.Logger]:
    """What every workflow script runs its work in: logging to the job's log file, and an
    `AttnlabError` ending the job in one line (`attnlab.errors`). `smk` is the script's
    `snakemake` object. Yields the attnlab logger."""
    log = setup_logging(smk.log[0])
    with one_line_errors():
        yield log
