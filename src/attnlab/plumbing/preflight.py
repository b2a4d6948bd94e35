"""What can be known wrong with a configuration before any job runs: checked by the dry run.

The schema (src/attnlab/plumbing/config.schema.yaml) checks each value on its own; `check_config`
checks what the schema cannot: values against each other, against the files they name and
against the checkpoint's folder, whole (`check_checkpoint`: its config.json, every weights
file, the tokenizer's files; or the GGUF file model.gguf_file names, `gguf_shape`), so that no
model is fine-tuned to be refused later. `check_samples` checks every stage's sample against
the split it is drawn from (`SAMPLES`), where the config, a count of a local file's rows or a
downloaded split's metadata tells its size. Every problem is a `ConfigError` of one line naming
the key. `check_writable` checks the results folder
before Snakemake touches it. This module imports neither torch nor transformers: Snakemake
imports it whenever it builds the DAG.
"""

from __future__ import annotations

import codecs
import csv
import functools
import io
import json
import math
import os
import re
import sys
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import Any, BinaryIO

from attnlab.plumbing.errors import AttnlabError, ConfigError
from attnlab.plumbing.families import CLASSIFIER, DECODER, FAMILIES, SCRATCH_DEFAULT, names

# the synthetic kinds that make next-token tasks (attnlab.data.induction)
NEXT_TOKEN_KINDS = ("induction", "repeat")


@dataclass(frozen=True)
class SyntheticShape:
    """What a synthetic classification kind fixes of its task: its classes and text segments."""

    classes: int
    segments: int


# The synthetic classification kinds, which attnlab.data.synthetic builds with these shapes
# (here, so that the dry run checks label_names and text_fields against them).
SYNTHETIC_SHAPES = {"pair3": SyntheticShape(classes=3, segments=2),
                    "pair2": SyntheticShape(classes=2, segments=2),
                    "single2": SyntheticShape(classes=2, segments=1)}

# The formats of a task's local files, by suffix, as attnlab.data.tasks.read_local reads them
# (here, so that the dry run refuses a file no reader takes).
LOCAL_FORMATS = {".parquet": "parquet", ".csv": "csv", ".tsv": "tsv", ".json": "json",
                 ".jsonl": "json"}
# A compressed text file (train.csv.gz) is read as the format of the suffix before its
# compression's, as pandas and datasets read one: each compression's module (zstandard is not
# a dependency: where it is missing, a .zst file is refused in one line).
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma", ".zst": "zstandard"}
# A hub id: "name" or "owner/name" (also a path under resources/).
HUB_ID = r"[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?"


@dataclass(frozen=True)
class ModelShape:
    """What the configuration's checks need to know of a model."""

    layers: int
    heads: int
    hidden: int
    positions: int | None  # the longest input it can take (None: no limit known)
    model_type: str = "bert"


def checkpoint_shape(path: str | Path, gguf_file: str | None = None) -> ModelShape:
    """The shape of the checkpoint directory `path` (as written by save_pretrained), read from
    its config.json, or from its GGUF file `gguf_file` (`gguf_shape`); refused in one line
    unless it is a model of a supported family whose weights files are all there and whole
    (`check_weights`)."""
    if gguf_file is not None:
        return gguf_shape(Path(path, gguf_file))
    config_file = Path(path, "config.json")
    if not config_file.is_file():
        raise ConfigError(f"model.pretrained: {path} is not a model directory (no config.json)")
    cfg = _read_json(config_file)
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        raise ConfigError(
            f"model.pretrained: {path} is a {model_type!r} model, a family whose attention "
            f"cannot be intervened on; supported families: {', '.join(FAMILIES)}"
        )
    check_weights(Path(path))
    sizes = FAMILIES[model_type].sizes
    keys = (sizes.layers, sizes.heads, sizes.hidden)
    missing = [key for key in keys if not isinstance(cfg.get(key), int)]
    if missing:
        raise ConfigError(f"model.pretrained: {config_file} has no {', '.join(missing)}")
    layers, heads, hidden = (cfg[key] for key in keys)
    positions = cfg.get(sizes.positions)
    return ModelShape(layers, heads, hidden, positions, model_type)


def check_checkpoint(path: str | Path, gguf_file: str | None = None) -> ModelShape:
    """`checkpoint_shape`, and the tokenizer's files (`check_tokenizer`; a GGUF file holds its
    own tokenizer): the whole folder a job will load (`check_config` checks the same, the
    model's kind before its tokenizer)."""
    shape = checkpoint_shape(path, gguf_file)
    if gguf_file is None:
        check_tokenizer(Path(path))
    return shape


# What transformers needs to read a GGUF file besides itself: gguf reads it, and it refuses one
# without accelerate (the optional dependency group `gguf` of pyproject.toml installs both).
GGUF_PACKAGES = ("gguf", "accelerate")
# the GGUF metadata of a model's sizes, after its architecture's name (`llama.block_count`)
GGUF_SIZES = ("block_count", "attention.head_count", "embedding_length", "context_length")


def gguf_shape(path: Path) -> ModelShape:
    """The shape of the GGUF checkpoint `path`, from its metadata (its family is its
    architecture, as transformers reads it); refused in one line, before anything is
    dequantized, when the packages that read it are missing, when it is damaged (not a GGUF
    file, or shorter than its tensors) or when its architecture is not a supported decoder
    family."""
    missing = [name for name in GGUF_PACKAGES if find_spec(name) is None]
    if missing:
        raise ConfigError(f"model.gguf_file: reading {path.name} needs the package(s) "
                          f"{', '.join(missing)}: pip install 'attnlab[gguf]' in the repository "
                          "(make run does so)")
    if not path.is_file():
        raise ConfigError(f"model.gguf_file: no file {path}")
    # imported here: only a GGUF checkpoint needs it (it imports numpy only)
    from gguf import GGUFReader

    try:  # the reader maps the file and parses its metadata and tensor table, nothing more
        reader = GGUFReader(path)
        architecture = reader.fields["general.architecture"].contents()
        end = max((t.data_offset + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as err:  # every kind of damage raises something else
        reason = " ".join(f"{type(err).__name__}: {err}".split())
        raise ConfigError(f"model.gguf_file: {path} is damaged or not a GGUF file ({reason}); "
                          "download or unpack it again") from None
    if end > path.stat().st_size:
        raise ConfigError(f"model.gguf_file: {path} is damaged ({path.stat().st_size} bytes "
                          f"where its tensor table describes {end}); download or unpack it again")
    if architecture not in FAMILIES or not FAMILIES[architecture].causal:
        raise ConfigError(f"model.gguf_file: {path} holds a {architecture!r} model, an "
                          "architecture whose attention cannot be intervened on; supported: "
                          f"{', '.join(names(DECODER))}")
    keys = [f"{architecture}.{key}" for key in GGUF_SIZES]
    absent = [key for key in keys[:3] if key not in reader.fields]
    if absent:
        raise ConfigError(f"model.gguf_file: {path} has no {', '.join(absent)}")
    layers, heads, hidden, positions = (
        int(reader.fields[key].contents()) if key in reader.fields else None for key in keys)
    return ModelShape(layers, heads, hidden, positions, architecture)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"model.pretrained: {path} is not valid JSON ({err})") from None


def _check_text(path: Path) -> None:
    """A tokenizer's vocabulary or merges: non-empty UTF-8 text."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"model.pretrained: {path} is not UTF-8 text ({err})") from None
    if not text.strip():
        raise ConfigError(f"model.pretrained: {path} is empty (save the model's tokenizer "
                          "there again)")


def safetensors_damage(path: Path) -> str | None:
    """What is wrong with the safetensors file `path`, read from its header without loading the
    tensors (None when nothing is): a file cut short by an interrupted download or copy would
    otherwise fail only when a job loads it, without naming it."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than a header"
        header_size = int.from_bytes(head, "little")
        try:
            header = json.loads(f.read(min(header_size, size)))
            ends = [tensor["data_offsets"][1] for key, tensor in header.items()
                    if key != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "its header is not readable"
    expected = 8 + header_size + max(ends, default=0)
    if size < expected:
        return f"{size} bytes where its header describes {expected}"
    return None


def torch_zip_damage(path: Path) -> str | None:
    """What is wrong with the PyTorch weights file `path` (None when nothing is), read from its
    zip directory without unpickling anything: torch.save writes a zip archive whose directory
    is at its end, the first part a cut download loses."""
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            end = max((member.header_offset + member.compress_size
                       for member in archive.infolist()), default=0)
    except (zipfile.BadZipFile, OSError):
        with path.open("rb") as f:
            # a file of torch.save before torch 1.6 is a bare pickle: no directory to check
            if f.read(1) == b"\x80":
                return None
        return f"{size} bytes whose zip directory cannot be read"
    if size < end:
        return f"{size} bytes where its zip directory describes {end}"
    return None


# The weights files transformers reads from a checkpoint folder, each with the check that
# finds it cut short or damaged without loading it (a GGUF file, which holds the configuration
# and tokenizer too, is checked whole by `gguf_shape`).
WEIGHTS_CHECKS: dict[str, Callable[[Path], str | None]] = {
    "*.safetensors": safetensors_damage,
    "pytorch_model*.bin": torch_zip_damage,
}
# a sharded checkpoint's index: which shard file holds each tensor
SHARD_INDEX = "*.index.json"


def check_weights(folder: Path) -> None:
    """Refuse in one line a checkpoint folder without weights, with a shard its index names
    missing, or with a weights file that is damaged (`WEIGHTS_CHECKS`)."""
    for index in sorted(folder.glob(SHARD_INDEX)):
        shards = _read_json(index).get("weight_map")
        if not isinstance(shards, dict):
            raise ConfigError(f"model.pretrained: {index} has no weight_map of tensors to shards")
        missing = sorted(set(map(str, shards.values())) - {p.name for p in folder.iterdir()})
        if missing:
            raise ConfigError(f"model.pretrained: {index} names {len(missing)} shard(s) missing "
                              f"from {folder} ({', '.join(missing)}); download or save the "
                              "checkpoint again")
    files = [(file, check) for pattern, check in WEIGHTS_CHECKS.items()
             for file in sorted(folder.glob(pattern))]
    if not files:
        raise ConfigError(f"model.pretrained: {folder} has no weights (model.safetensors or "
                          "pytorch_model.bin)")
    for file, check in files:
        damage = check(file)
        if damage:
            raise ConfigError(f"model.pretrained: {file} is damaged ({damage}); download or "
                              "save the checkpoint again")


# The files a tokenizer loads from, one set per kind: transformers needs one whole set (the fast
# tokenizer's own file, WordPiece's vocabulary, byte-level BPE's vocabulary and merges, or a
# SentencePiece model).
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.txt",), ("vocab.json", "merges.txt"),
                   ("*.model",))
# the files beside them that hold its settings, read too when present
TOKENIZER_SETTINGS = ("tokenizer_config.json", "special_tokens_map.json")


def check_tokenizer(folder: Path) -> None:
    """Refuse in one line a checkpoint folder whose tokenizer cannot load from the files there:
    no whole set of TOKENIZER_FILES, a settings file or vocab.json that is not JSON, a
    vocabulary or merges file that is empty or not UTF-8 text, a SentencePiece model that is
    not one, or a tokenizer.json that the tokenizers library cannot read."""
    def present(name: str) -> bool:
        return next(folder.glob(name), None) is not None

    if not any(all(map(present, names)) for names in TOKENIZER_FILES):
        partial = [names for names in TOKENIZER_FILES if any(map(present, names))]
        found = ", ".join(name for names in partial for name in names if present(name))
        lacking = ", ".join(name for names in partial for name in names if not present(name))
        raise ConfigError(
            f"model.pretrained: {folder} has {found} but no {lacking}" if partial else
            f"model.pretrained: {folder} has no tokenizer files (tokenizer.json, vocab.txt, "
            "vocab.json with merges.txt, or a SentencePiece *.model); save the model's "
            "tokenizer there too (tokenizer.save_pretrained)")
    for name in (*TOKENIZER_SETTINGS, "vocab.json"):
        if present(name):
            _read_json(folder / name)
    for name in ("vocab.txt", "merges.txt"):
        if present(name):
            _check_text(folder / name)
    for path in folder.glob("*.model"):
        # a SentencePiece model is a protobuf message whose first field is its pieces (tag 0x0a)
        with path.open("rb") as f:
            if f.read(1) != b"\x0a":
                raise ConfigError(f"model.pretrained: {path} is not a SentencePiece model "
                                  "(save the model's tokenizer there again)")
    if present("tokenizer.json"):
        # imported here: the tokenizers library is small, but only a checkpoint needs it
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as err:  # the library raises one Exception for every kind of damage
            raise ConfigError(f"model.pretrained: {folder / 'tokenizer.json'} cannot be loaded "
                              f"as a tokenizer ({' '.join(str(err).split())})") from None


def model_shape(model: dict[str, Any], pretrained: str | None) -> ModelShape | None:
    """The shape of the configured model: from model.scratch, or from the local checkpoint
    `pretrained`; None while a hub checkpoint is not downloaded yet."""
    if model["source"] == "scratch":
        size = model["scratch"]
        if size["hidden"] % size["heads"]:
            raise ConfigError(f"model.scratch.hidden: {size['hidden']} is not a multiple of "
                              f"model.scratch.heads ({size['heads']})")
        return ModelShape(size["layers"], size["heads"], size["hidden"], model["max_length"])
    if pretrained is None or not Path(pretrained).is_dir():
        return None
    return checkpoint_shape(pretrained, model["gguf_file"])


def _check_layers(key: str, layers: list[int], shape: ModelShape) -> None:
    for layer in layers:
        if not -shape.layers <= layer < shape.layers:
            raise ConfigError(f"{key}: layer {layer} is out of range; the model has "
                              f"{shape.layers} layers (0..{shape.layers - 1})")


def local_format(path: str | Path) -> tuple[str, str | None]:
    """The format of a local data file by its suffix (LOCAL_FORMATS) and its compression's
    module (COMPRESSIONS; None: not compressed). Raises LookupError saying what is wrong (the
    caller names the key or the file)."""
    suffixes = [suffix.lower() for suffix in Path(path).suffixes] or [""]
    compression = COMPRESSIONS.get(suffixes[-1])
    suffix = (["", *suffixes][-2] if compression else suffixes[-1])
    if suffix not in LOCAL_FORMATS:
        raise LookupError(f"is not a file type attnlab reads ({', '.join(LOCAL_FORMATS)}; a "
                          "CSV, TSV or JSON lines file may be compressed: "
                          f"{', '.join(COMPRESSIONS)})")
    if compression and LOCAL_FORMATS[suffix] == "parquet":
        raise LookupError("is a compressed Parquet file: Parquet compresses its columns itself, "
                          "so attnlab reads the .parquet file as it is")
    if compression and find_spec(compression) is None:
        raise LookupError(f"is compressed with Zstandard, which needs the module {compression} "
                          f"(pip install {compression}), not installed here")
    return LOCAL_FORMATS[suffix], compression


def open_local(path: str | Path, compression: str | None) -> BinaryIO:
    """A local data file open for reading its bytes, decompressed (`local_format`)."""
    if compression is None:
        return Path(path).open("rb")
    return import_module(compression).open(path, "rb")


def _parquet_rows(path: str | Path) -> int | None:
    """The rows of a Parquet file, from its metadata (None where it cannot be read)."""
    # imported here: only a task of Parquet files needs it when the DAG is built
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path).num_rows
    except (OSError, ValueError):
        return None


def local_rows(path: str | Path, encoding: str) -> int | None:
    """The rows attnlab.data.tasks.read_local reads from a local data file, counted without
    making a table of them: a Parquet file's from its metadata, a CSV or TSV file's records (a
    CSV's quoted field may span lines), a JSON lines file's non-blank lines. None where the file
    cannot be read so (prepare_data then names what is wrong)."""
    try:
        file_format, compression = local_format(path)
    except LookupError:
        return None
    if file_format == "parquet":
        return _parquet_rows(path)
    # utf-8-sig reads UTF-8 with or without a byte-order mark, as read_local does
    codec = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
    try:
        with open_local(path, compression) as raw:
            if file_format == "json":  # one object a line, split at newlines only
                text = io.TextIOWrapper(raw, encoding=codec, newline="\n")
                return sum(1 for line in text if line.strip())
            text = io.TextIOWrapper(raw, encoding=codec, newline="")
            quoting = csv.QUOTE_NONE if file_format == "tsv" else csv.QUOTE_MINIMAL
            records = csv.reader(text, delimiter="\t" if file_format == "tsv" else ",",
                                 quoting=quoting, strict=True)
            # the header is no row, and a blank line holds none
            return max(sum(1 for record in records if record) - 1, 0)
    except Exception:  # decoding, parsing, and each compression's own kind of damage
        return None


def hub_file(hub: Mapping[str, Any], split: str) -> str:
    """Where rule download_data puts one split of a hub dataset (config tasks.<name>.hub)."""
    return f"resources/datasets/{hub['path']}/{hub['name'] or 'default'}/{split}.parquet"


def hub_files(hub: Mapping[str, Any]) -> dict[str, str]:
    """The downloaded splits a hub task reads, by split: no dev split when its dev examples are
    held out from train."""
    files = {"train": hub_file(hub, hub["train_split"])}
    if hub["dev_split"] is not None:
        files["dev"] = hub_file(hub, hub["dev_split"])
    return files


def undownloaded(config: Mapping[str, Any]) -> list[str]:
    """The hub splits the config's tasks read that rule download_data has not written yet. Until
    they are there the dry run knows their sizes only by rows.<split> (`split_rows`), so `make
    run` downloads them first and then plans the run, checking every sample against them
    before any other job."""
    files = [path for task in config["tasks"].values() if task["source"] == "hub"
             for path in hub_files(task["hub"]).values() if not Path(path).is_file()]
    return list(dict.fromkeys(files))


@dataclass(frozen=True)
class Rows:
    """A split's number of examples as the dry run knows it: exactly, or at most (a sample of
    rows.<split> rows of a source whose size is not known before it is read)."""

    n: int
    exact: bool


def _at_most(rows: Rows | None, limit: int | None) -> Rows | None:
    """`rows` limited to a sample of at most `limit` (None: no limit)."""
    if limit is None:
        return rows
    if rows is None:
        return Rows(limit, exact=False)
    return Rows(min(rows.n, limit), rows.exact)


def _source_rows(task: Mapping[str, Any], split: str) -> Rows | None:
    """The rows of a local or hub task's source split, before sampling (attnlab.data.selection:
    a dev split held out from train takes rows.dev rows of it); None while unknown (a hub split
    not yet downloaded)."""
    if task["source"] == "local":
        n = local_rows(task["local"][split], task["local"]["encoding"])
        return None if n is None else Rows(n, exact=True)
    hub = task["hub"]
    held_out = hub["dev_split"] is None
    path = hub_file(hub, hub["train_split"] if split == "train" or held_out else hub["dev_split"])
    n = _parquet_rows(path) if Path(path).is_file() else None
    source = None if n is None else Rows(n, exact=True)
    if not held_out:
        return source
    dev = _at_most(source, task["rows"]["dev"])
    if split == "dev" or source is None:
        return dev
    return Rows(source.n - dev.n, exact=True)


def split_rows(config: Mapping[str, Any], name: str, split: str) -> Rows | None:
    """The examples of the split `split` (train, dev, or attributed: the dev examples rule
    attribute attributes) of the task `name`, as far as the config and a count of its files'
    rows tell before any job runs (`Rows`); None where nothing bounds them (a hub split not yet
    downloaded, texts cut into sentences, with no rows.<split>)."""
    task = config["tasks"][name]
    if split == "attributed":
        return _at_most(split_rows(config, name, "dev"), config["attribution"]["max_examples"])
    if "repeat" in task:  # exactly this many prompts, or prepare_data refuses the task
        return Rows(task["repeat"][f"n_{split}"], exact=True)
    if task["source"] == "synthetic":
        source = Rows(task["synthetic"][f"n_{split}"], exact=True)
    elif task["sentences"]:
        source = None
    elif task["source"] == "mix":
        parts = [split_rows(config, part, split) for part in task["mix"]]
        source = None if None in parts else Rows(sum(part.n for part in parts),
                                                 all(part.exact for part in parts))
    else:
        source = _source_rows(task, split)
    # a next-token task's prompts are taken as they are (attnlab.data.prompts), a
    # classification task's sampled (attnlab.data.selection)
    if task.get("kind") == "next_token":
        return source
    return _at_most(source, (task["rows"] or {}).get(split))


@dataclass(frozen=True)
class Sample:
    """A stage's sample of a task's split: the rule that first draws it, the setting (a dotted
    config key) that sizes it, and the split (train, dev, attributed: the dev examples rule
    attribute attributes; or a config key whose value names train or dev). A stage takes the
    first this many examples, or all the split has when it has fewer; a sample that follows
    another (`after`: the dev examples after that sample's) must find all of its own there, or
    the stage could not run (`leaves`: what they are for)."""

    rule: str
    key: str
    split: str
    after: str | None = None
    leaves: str = ""


# Every setting that sizes a stage's sample, and the split it reads: the dry run checks each
# against the task's split (check_samples), and the two samples that follow another, by the same
# function as their stages (check_after).
SAMPLES = (
    Sample("attribute", "attribution.max_examples", "dev"),
    Sample("quadrature_study", "attribution.study_examples", "dev"),
    Sample("head_importance", "heads.importance_examples", "attributed"),
    Sample("head_importance", "heads.min_evaluation_examples", "dev",
           after="heads.importance_examples", leaves="to evaluate global pruning"),
    Sample("trees", "trees.examples", "attributed"),
    Sample("mine_triggers", "triggers.source_examples", "triggers.source_split"),
    Sample("effective_attention", "identifiability.effective_attention.examples", "dev"),
    Sample("token_identifiability", "identifiability.token_identifiability.train_examples",
           "train"),
    Sample("token_identifiability", "identifiability.token_identifiability.eval_examples",
           "dev"),
    Sample("token_mixing", "identifiability.token_mixing.examples", "dev"),
    Sample("attention_permutation", "explanation.attention_permutation.examples", "dev"),
    Sample("adversarial_attention", "explanation.adversarial_keys.train_examples", "train"),
    Sample("adversarial_attention", "explanation.adversarial_keys.examples", "dev"),
    Sample("adversarial_attention", "explanation.adversarial_attention.examples", "dev"),
    Sample("interaction_methods", "interaction_methods.examples", "attributed"),
    Sample("induction", "induction.examples", "dev"),
    Sample("induction_heads", "induction.head_examples", "dev"),
    Sample("induction_heads", "induction.ablation_examples", "dev",
           after="induction.head_examples", leaves="to mean-ablate the heads on"),
)
SAMPLE_OF = {sample.key: sample for sample in SAMPLES}
SPLIT_NAMES = {"train": "train examples", "dev": "dev examples",
               "attributed": "attributed dev examples"}


def setting(config: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted config key `key` (heads.importance_examples)."""
    for part in key.split("."):
        config = config[part]
    return config


def sample_split(config: Mapping[str, Any], sample: Sample) -> str:
    """The split `sample` is drawn from (a config key's value where its split is one)."""
    return setting(config, sample.split) if "." in sample.split else sample.split


def check_after(settings: Mapping[str, Any], task: str, key: str, *, n_split: int,
                n_before: int) -> None:
    """Refuse (`ConfigError`) the sample of the setting `key`, which follows another's in the
    dev split (`Sample.after`), when fewer examples remain for it than it asks: the split holds
    `n_split`, of which the sample before takes `n_before`. `settings` holds both keys (the
    config, or a stage's settings)."""
    sample = SAMPLE_OF[key]
    needs, left = setting(settings, key), n_split - n_before
    if left < needs:
        raise ConfigError(
            f"{sample.after} = {setting(settings, sample.after)} takes {n_before} of the "
            f"{n_split} dev examples of task {task}, which leaves {left} {sample.leaves}, fewer "
            f"than {key} = {needs}: lower the first or the second, or give the task more dev "
            "examples")


def check_samples(config: Mapping[str, Any], rule_tasks: Mapping[str, Iterable[str]]
                  ) -> list[str]:
    """Check every stage's sample (SAMPLES) against the split it is drawn from, on the tasks
    each rule runs on (`rule_tasks`: rule -> tasks), where the dry run knows the split's size
    (`split_rows`): refuse (`ConfigError`) a sample that follows another and would not find its
    examples (`check_after`, as its stage does). Returns one warning a task and split whose
    size is known and that holds fewer examples than samples ask for, which take all of it."""
    rows = functools.cache(lambda name, split: split_rows(config, name, split))
    short: dict[tuple[str, str], list[str]] = {}
    for sample in SAMPLES:
        value = setting(config, sample.key)
        split = sample_split(config, sample)
        for name in rule_tasks.get(sample.rule, ()):
            size = rows(name, split)
            # an empty split: prepare_data's one line names its file
            if value is None or size is None or size.n == 0:
                continue
            if sample.after is not None:
                # the more examples a split may hold, the more are left for the later sample:
                # a size known as a bound refuses only what no size within it allows
                before = SAMPLE_OF[sample.after]
                check_after(config, name, sample.key, n_split=size.n,
                            n_before=min(setting(config, before.key),
                                         rows(name, sample_split(config, before)).n))
            elif size.exact and size.n < value:
                short.setdefault((name, split), []).append(f"{sample.key} = {value}")
    return [f"warning: task {name} has {rows(name, split).n} {SPLIT_NAMES[split]}, fewer "
            f"than {', '.join(keys)} {'asks' if len(keys) == 1 else 'ask'} for: "
            f"{'it takes' if len(keys) == 1 else 'each takes'} all of them"
            for (name, split), keys in short.items()]


def check_synthetic(name: str, task: Mapping[str, Any]) -> None:
    """Refuse (`ConfigError`) a synthetic classification task whose label_names or text_fields
    do not match what its kind fixes (SYNTHETIC_SHAPES)."""
    kind = task["synthetic"]["kind"]
    if kind not in SYNTHETIC_SHAPES:  # a next-token kind: prompts, checked with its kind
        return
    shape = SYNTHETIC_SHAPES[kind]
    if len(task["label_names"]) != shape.classes:
        raise ConfigError(f"tasks.{name}.label_names: synthetic kind {kind!r} has "
                          f"{shape.classes} classes, and label_names names "
                          f"{len(task['label_names'])}")
    if len(task["text_fields"]) != shape.segments:
        raise ConfigError(f"tasks.{name}.text_fields: synthetic kind {kind!r} has "
                          f"{shape.segments} text segment(s), and text_fields names "
                          f"{len(task['text_fields'])}")


def _check_tasks(config: dict[str, Any]) -> None:
    for name, task in config["tasks"].items():
        if task["source"] == "hub" and not re.fullmatch(HUB_ID, task["hub"]["path"]):
            raise ConfigError(f"tasks.{name}.hub.path: {task['hub']['path']!r} is not a hub "
                              "dataset id (like nyu-mll/glue)")
        if task["source"] == "local":
            for split in ("train", "dev"):
                path = Path(task["local"][split])
                if not path.is_file():
                    raise ConfigError(f"tasks.{name}.local.{split}: no file {path}")
                try:
                    local_format(path)
                except LookupError as err:
                    raise ConfigError(f"tasks.{name}.local.{split}: {path} {err}") from None
            try:
                codecs.lookup(task["local"]["encoding"])
            except LookupError:
                raise ConfigError(f"tasks.{name}.local.encoding: {task['local']['encoding']!r} is "
                                  "not an encoding Python knows (e.g. utf-8, latin-1, cp1252, "
                                  "utf-16)") from None
        # a task of real sentences made into prompts (repeat) says its dev prompts in repeat
        if task["source"] == "hub" and task["hub"]["dev_split"] is None and not (
                task["rows"] or {}).get("dev") and "repeat" not in task:
            raise ConfigError(f"tasks.{name}.rows.dev: hub.dev_split is null, so the dev split "
                              "is held out from the train split: say how many rows")
        single = len(task["text_fields"]) == 1
        if task["sentences"] and not single:
            raise ConfigError(f"tasks.{name}.sentences: cuts one text field into sentences; the "
                              f"task has {len(task['text_fields'])}")
        if task["source"] == "mix":
            _check_mix(config, name, task)


def _check_mix(config: dict[str, Any], name: str, task: dict[str, Any]) -> None:
    tasks = config["tasks"]
    for part in task["mix"]:
        if part not in tasks or part == name:
            others = ", ".join(t for t in tasks if t != name)
            raise ConfigError(f"tasks.{name}.mix: {part!r} is not another task of this config "
                              f"({others})")
        if len(tasks[part]["text_fields"]) != 1 or tasks[part]["source"] == "mix":
            raise ConfigError(f"tasks.{name}.mix: task {part} must have one text field and "
                              "its own source (not mix)")
    if len(task["text_fields"]) != 1:
        raise ConfigError(f"tasks.{name}.text_fields: a mixed task has one text field")
    if len(task["label_names"]) != len(task["mix"]):
        raise ConfigError(f"tasks.{name}.label_names: one name per mixed task "
                          f"({len(task['mix'])}), got {len(task['label_names'])}")


def task_role(task: dict[str, Any]) -> str:
    """A task's role (tasks.<name>.role): absent is "all", as the schema fills in no default."""
    return task.get("role", "all")


def task_kind(config: dict[str, Any]) -> str:
    """The kind of the configuration's tasks (classification or next_token), one for all."""
    kinds = {name: task.get("kind", "classification") for name, task in config["tasks"].items()}
    if len(set(kinds.values())) > 1:
        raise ConfigError("tasks: the tasks are of different kinds ("
                          + ", ".join(f"{name}: {kind}" for name, kind in kinds.items())
                          + "); one configuration's tasks are all classification or all "
                          "next_token")
    return next(iter(kinds.values()))


def _check_kind(config: dict[str, Any]) -> None:
    """A next_token configuration needs a decoder, and a classification one an encoder; it
    runs no stage that compares tasks, its trees are normalised by the layer's maximum, and
    its prompts are not truncated."""
    kind = task_kind(config)
    _check_scratch_family(config["model"], kind)
    if kind == "next_token":
        _check_decoder_settings(config)
    for name, task in config["tasks"].items():
        _check_task_of_kind(name, task, kind)


def _check_scratch_family(model: dict[str, Any], kind: str) -> None:
    """model.scratch.family: a family built from scratch, and (a scratch model) one that can
    learn tasks of `kind`."""
    family = model["scratch"].get("family", SCRATCH_DEFAULT)
    fitting = names(DECODER if kind == "next_token" else CLASSIFIER, scratch=True)
    if family not in names(scratch=True):
        raise ConfigError(f"model.scratch.family: {family!r} is not a family built from "
                          f"scratch ({', '.join(names(scratch=True))})")
    if model["source"] == "scratch" and family not in fitting:
        raise ConfigError(f"model.scratch.family: {family!r} cannot learn "
                          f"{kind} tasks; use {' or '.join(fitting)}")


def _check_decoder_settings(config: dict[str, Any]) -> None:
    """The settings a next_token configuration cannot take."""
    # a prompt cut short would lose the query (its last token) or shift every planted position
    if config["model"]["truncate"]:
        raise ConfigError("model.truncate: a next_token task's prompts are never truncated; "
                          "raise model.max_length instead")
    if config["trees"]["normalise"] != "layer":
        raise ConfigError(f"trees.normalise: {config['trees']['normalise']!r} leaves out a "
                          "classifier's [CLS] row; a decoder's trees (next_token tasks) take "
                          "'layer'")
    # rule induction reads the attributions rule attribute dumped
    attribution = config["attribution"]
    if not attribution["keep_full"]:
        raise ConfigError("attribution.keep_full: false; rule induction reads the full "
                          "attribution matrices from the dumps of a next_token configuration: "
                          "set it to true")
    if (attribution["max_examples"] or math.inf) < config["induction"]["examples"]:
        raise ConfigError(f"induction.examples: {config['induction']['examples']} is more than "
                          f"the {attribution['max_examples']} examples rule attribute attributes "
                          "(attribution.max_examples)")
    for key in ("similar_pairs", "dissimilar_pairs"):
        if config["heads"][key]:
            raise ConfigError(f"heads.{key}: the cross-task correlation of head importance is "
                              "not run for next_token tasks; leave it empty")


def _check_task_of_kind(name: str, task: dict[str, Any], kind: str) -> None:
    """Task `name`'s keys and source fit the configuration's `kind` of tasks."""
    decoder = kind == "next_token"
    if decoder and task.get("shuffle_labels"):
        raise ConfigError(f"tasks.{name}.shuffle_labels: a next_token task has no labels to "
                          "shuffle (it is a classification task's control); leave it out")
    if "repeat" in task and not (decoder and task["source"] in ("hub", "local")):
        raise ConfigError(f"tasks.{name}.repeat: makes next_token prompts of the sentences "
                          "of a hub or local source; this task is "
                          f"{task.get('kind', 'classification')} from {task['source']!r}: "
                          "leave repeat out")
    if decoder and (task["source"] == "mix"
                    or task["source"] == "hub" and "repeat" not in task):
        raise ConfigError(f"tasks.{name}.source: {task['source']!r}; a next_token task's "
                          "data is synthetic (induction or repeat), local (prompts and "
                          "targets), or the sentences of a hub or local source made into "
                          f"repeat prompts (tasks.{name}.repeat)")
    if "target_tokens" in task and not (decoder and task["source"] == "local"
                                        and "repeat" not in task):
        raise ConfigError(f"tasks.{name}.target_tokens: says how a next_token task's own "
                          "targets (source local, without repeat) are tokenized; this task "
                          "has none: leave it out")
    next_token = (task["source"] == "synthetic"
                  and task["synthetic"]["kind"] in NEXT_TOKEN_KINDS)
    if task["source"] == "synthetic" and next_token != decoder:
        raise ConfigError(f"tasks.{name}.synthetic.kind: {task['synthetic']['kind']!r} "
                          f"does not make {kind} tasks (induction and repeat "
                          "make next_token tasks, the others classification tasks)")


def attributed_idx(config: dict[str, Any], task: dict[str, Any]) -> range | None:
    """The idx values of a task's attributed dev examples, where the config alone says them
    (synthetic tasks: idx 0..n_dev-1); None for data read from files."""
    if task["source"] != "synthetic":
        return None
    limit = config["attribution"]["max_examples"]
    return range(min(task["synthetic"]["n_dev"], limit or task["synthetic"]["n_dev"]))


def _check_pairs(heads: dict[str, Any], tasks: dict[str, Any]) -> None:
    """heads.similar_pairs and dissimilar_pairs: pairs of two tasks of this config, each pair
    once (a task paired with itself correlates perfectly; a pair counted twice, or as both
    similar and dissimilar, would weigh the comparison silently), and no task with shuffled
    labels (the floor every pair is compared with, not a task of the paper's)."""
    seen: dict[frozenset[str], str] = {}
    for key in ("similar_pairs", "dissimilar_pairs"):
        for pair in heads[key]:
            if not set(pair) <= set(tasks):
                raise ConfigError(f"heads.{key}: pair {pair} names a task that is not in tasks "
                                  f"({', '.join(tasks)})")
            shuffled = [name for name in pair if tasks[name].get("shuffle_labels")]
            if shuffled:
                raise ConfigError(f"heads.{key}: pair {pair} names task {shuffled[0]}, whose "
                                  "labels are shuffled (tasks.<name>.shuffle_labels): it is the "
                                  "floor every pair is compared with; leave it out of the pairs")
            if pair[0] == pair[1]:
                raise ConfigError(f"heads.{key}: pair {pair} pairs a task with itself")
            if frozenset(pair) in seen:
                raise ConfigError(f"heads.{key}: pair {pair} is listed already (in "
                                  f"heads.{seen[frozenset(pair)]})")
            seen[frozenset(pair)] = key


def _check_roles(config: dict[str, Any]) -> None:
    """tasks.<name>.role: a task there for the cross-task correlation only is in one of its
    pairs or is its floor (labels shuffled; elsewhere nothing would read it), one there for
    the induction-head analysis only is a next_token task (the only kind that analysis runs
    on), and some task runs every stage."""
    paired = {task for key in ("similar_pairs", "dissimilar_pairs")
              for pair in config["heads"][key] for task in pair}
    roles = {name: task_role(task) for name, task in config["tasks"].items()}
    for name, role in roles.items():
        if (role == "correlation" and name not in paired
                and not config["tasks"][name].get("shuffle_labels")):
            raise ConfigError(f"tasks.{name}.role: 'correlation' runs the task for the cross-task "
                              "correlation only, and neither heads.similar_pairs nor "
                              "heads.dissimilar_pairs names it, nor are its labels shuffled (the "
                              "correlation's floor); add it to a pair, or leave role out to run "
                              "every stage on it")
        if role == "induction_heads" and task_kind(config) != "next_token":
            raise ConfigError(f"tasks.{name}.role: 'induction_heads' runs the task for the "
                              "induction-head analysis only, which next_token tasks have; "
                              "leave role out to run every stage on it")
    if "all" not in roles.values():
        raise ConfigError("tasks: every task has a role other than 'all' ("
                          + ", ".join(f"{name}: {role}" for name, role in roles.items())
                          + "); at least one must run every stage (role 'all', or no role)")


def check_writable(folder: str | Path) -> None:
    """Refuse in one line a results folder that this run cannot write into (the nearest folder
    that exists, when it does not yet): checked before Snakemake touches it, which would
    otherwise end in its own traceback, e.g. when it removes the log of a job that failed
    before. Raises `AttnlabError`."""
    existing = Path(folder)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise AttnlabError(f"{existing}: is not a folder, so the results cannot be written to "
                           f"{folder}")
    # os.access, unlike the mode bits, also answers for root: no for a read-only mount or an
    # immutable folder
    if not os.access(existing, os.W_OK | os.X_OK):
        raise AttnlabError(f"{existing}: the results folder cannot be written; make it writable "
                           f"(chmod -R u+w {existing}) or change `name` to write to "
                           "results/<another name>")


def check_config(config: dict[str, Any], pretrained: str | None) -> None:
    """Check what the schema cannot (see the module's docstring). `config` has the schema's
    defaults filled in; `pretrained` is the local directory of model.pretrained (None for a
    scratch model). Raises `ConfigError`."""
    _check_tasks(config)
    _check_kind(config)
    for name, task in config["tasks"].items():
        if task["source"] == "synthetic":
            check_synthetic(name, task)
    heads = config["heads"]
    # task_correlation, part of every run, correlates the attribution importance
    if "attribution" not in heads["methods"]:
        raise ConfigError(f"heads.methods: {heads['methods']} lacks 'attribution', which the "
                          "cross-task correlation of every run needs")
    _check_pairs(heads, config["tasks"])
    _check_roles(config)
    _check_source(config)
    _check_attributed(config)
    shape = model_shape(config["model"], pretrained)
    if shape is not None:
        _check_model_shape(config, pretrained, shape)


def _check_source(config: dict[str, Any]) -> None:
    """The settings that model.source rules out: pre-training and a GGUF file for a model
    that is not built from scratch or is, controls for one used as published."""
    model = config["model"]
    if model["pretrain"]["epochs"] and model["source"] != "scratch":
        raise ConfigError(f"model.pretrain.epochs: pre-training is for scratch models only; "
                          f"model.source is {model['source']!r}, which starts from "
                          "model.pretrained")
    if model["gguf_file"] is not None and model["source"] == "scratch":
        raise ConfigError(f"model.gguf_file: {model['gguf_file']!r} is a file of "
                          "model.pretrained; model.source is scratch, which reads none")
    if config["controls"] and model["source"] == "finetuned":
        raise ConfigError(f"controls: {config['controls']} compare with the model fine-tuning "
                          "starts from; model.source finetuned is used as published, with no "
                          "untrained model of ours")


def _check_attributed(config: dict[str, Any]) -> None:
    """The attribution settings against each other and the trees' against what is
    attributed and dumped."""
    trees, attribution = config["trees"], config["attribution"]
    # the adaptive rule's first panels take 3 gradient evaluations per scan interval at most
    if attribution["max_steps"] < 3 * attribution["scan_steps"]:
        raise ConfigError(f"attribution.max_steps: {attribution['max_steps']} is below 3 x "
                          f"attribution.scan_steps ({attribution['scan_steps']})")
    # the dumps keep edges down to attribution.edge_min_fraction of each layer's maximum only
    if trees["tau"] < attribution["edge_min_fraction"]:
        raise ConfigError(f"trees.tau: {trees['tau']} is below attribution.edge_min_fraction "
                          f"({attribution['edge_min_fraction']}), the smallest edge the dumps "
                          "keep")
    for name, task in config["tasks"].items():
        available = attributed_idx(config, task)
        missing = sorted(set(trees["example_idx"]) - set(available or []))
        if available is not None and missing:
            raise ConfigError(f"trees.example_idx: {missing} are not attributed dev examples of "
                              f"task {name} (idx {available.start}..{available.stop - 1})")


def _check_model_shape(config: dict[str, Any], pretrained: str | None,
                       shape: ModelShape) -> None:
    """The checkpoint's family, tokenizer, positions and layers (`shape`, `model_shape`'s)
    against the tasks' kind and the settings that name positions or layers."""
    decoder = task_kind(config) == "next_token"
    if config["model"]["source"] != "scratch" and FAMILIES[shape.model_type].causal != decoder:
        fitting = names(DECODER if decoder else CLASSIFIER)
        raise ConfigError(f"model.pretrained: {pretrained} is a {shape.model_type!r} model, "
                          f"which cannot do {task_kind(config)} tasks; they need "
                          f"{'a decoder' if decoder else 'an encoder'} ({', '.join(fitting)})")
    # the rest of the folder, once it is of use (a GGUF file holds its own tokenizer)
    if config["model"]["source"] != "scratch" and config["model"]["gguf_file"] is None:
        check_tokenizer(Path(pretrained))
    if shape.positions is not None and config["model"]["max_length"] > shape.positions:
        raise ConfigError(f"model.max_length: {config['model']['max_length']} is more than the "
                          f"{shape.positions} positions the model has")
    trees = config["trees"]
    if trees["heatmap_layer"] is not None:
        _check_layers("trees.heatmap_layer", [trees["heatmap_layer"]], shape)
    _check_layers("explanation.adversarial_attention.layers",
                  config["explanation"]["adversarial_attention"]["layers"] or [], shape)


if __name__ == "__main__":
    # `python -m attnlab.plumbing.preflight CONFIG`: the hub splits make run downloads before it
    # plans the run (`undownloaded`), one a line
    from attnlab.plumbing.config import load_config

    print("\n".join(undownloaded(load_config(sys.argv[1]))))
