"""Tasks are data: a task is its text columns, its label names and two Parquet splits.

A task comes from the synthetic generator, from the Hugging Face hub (downloaded once by
`attnlab.data.hub`), from local Parquet/CSV/JSON files (the offline way to use real GLUE data),
or from other tasks' examples labelled by the task they come from (`mix`). Real data can be cut
into sentences, sampled, and given a held-out dev split (`attnlab.data.selection`).
Every split is validated before anything is written, and every bad-data error is one readable
line (`DataError`).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from attnlab.data import selection, synthetic
from attnlab.plumbing.errors import AttnlabError, ConfigError
from attnlab.plumbing.outputs import atomic_path
from attnlab.plumbing.preflight import check_synthetic, local_format, open_local

if TYPE_CHECKING:  # for type hints only: the trees job then imports no transformers
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

GROUND_TRUTH_COLUMNS = ("gt_a_segment", "gt_a_word", "gt_b_segment", "gt_b_word")


class DataError(AttnlabError, ValueError):
    """Input data that cannot be used; the message is one line naming file, column and value."""


@dataclass(frozen=True)
class TaskSpec:
    name: str
    text_fields: tuple[str, ...]
    label_names: tuple[str, ...]
    label_field: str = "label"

    @classmethod
    def from_config(cls, name: str, cfg: dict[str, Any]) -> TaskSpec:
        """Build from one entry of config["tasks"]."""
        text_fields = tuple(cfg["text_fields"])
        label_names = tuple(cfg["label_names"])
        if len(text_fields) not in (1, 2):
            raise ConfigError(f"tasks.{name}.text_fields: need 1 or 2 columns, got {text_fields}")
        if len(label_names) < 2:
            raise ConfigError(f"tasks.{name}.label_names: need at least 2, got {label_names}")
        return cls(name, text_fields, label_names, cfg.get("label_field", "label"))

    def validate(self, df: pd.DataFrame, where: str) -> pd.DataFrame:
        """`validate_split` of this task (a next-token task's `PromptSpec` has its own)."""
        return validate_split(df, self, Origin(where))


def _one_line(err: BaseException) -> str:
    # a reader may raise a generic error whose cause (the parser's error) says what is wrong
    while err.__cause__ is not None:
        err = err.__cause__
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _show(value: Any) -> str:
    """A value as a user would write it (5, not np.int64(5))."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def validate_split(df: pd.DataFrame, spec: TaskSpec, origin: Origin) -> pd.DataFrame:
    """Check that `df` is a usable split of `spec`; an error names the file (or generator) and
    the row as a user finds it there (`Origin.locate`)."""
    where = origin.where
    if df.empty:
        raise DataError(f"{where}: empty split (no rows)")
    for column in (*spec.text_fields, spec.label_field):
        if column not in df.columns:
            existing = ", ".join(map(str, df.columns))
            raise DataError(f"{where}: missing column {column!r} (columns are {existing})")
    for column in spec.text_fields:
        not_text = ~df[column].map(lambda value: isinstance(value, str))
        if not_text.any():
            row = int(np.flatnonzero(not_text)[0])
            value = df[column].iloc[row]
            what = "missing" if pd.api.types.is_scalar(value) and pd.isna(value) else _show(value)
            raise DataError(f"{origin.locate(df, row)}: column {column!r} is {what}, not text")
    allowed = range(len(spec.label_names))
    labels = df[spec.label_field]
    bad = ~labels.map(
        lambda value: isinstance(value, int | float | np.number) and value in allowed
    ).astype(bool)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{origin.locate(df, row)}: column {spec.label_field!r} has label "
            f"{_show(labels.iloc[row])}; labels must be integers in 0..{len(allowed) - 1} "
            f"({', '.join(spec.label_names)})"
        )
    # every label is a whole number in range: 1.0 from a CSV or JSON file becomes 1
    return df.astype({spec.label_field: "int64"})


def _read_parquet(path: str | os.PathLike) -> pd.DataFrame:
    """The rows of a Parquet file (a local table, a downloaded or prepared split), its column
    names checked as a text file's header is (`_check_header`)."""
    try:
        # before pandas, whose read fails on a repeated name without naming the column
        _check_header(str(path), pq.read_schema(path).names, "")
        return pd.read_parquet(path)
    except DataError:
        raise
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: cannot read as Parquet ({_one_line(err)})") from err


class SplitSpec(Protocol):
    """What a split is checked against: a classification task's `TaskSpec`, a next-token
    task's `prompts.PromptSpec`."""

    name: str

    def validate(self, df: pd.DataFrame, where: str) -> pd.DataFrame: ...


def load_split(path: str | os.PathLike, spec: SplitSpec) -> pd.DataFrame:
    """Read a Parquet split written by `prepare_task` (a next-token task's: by
    `prompts.write_prompts`) and validate it."""
    return spec.validate(_read_parquet(path), str(path))


def _synthetic_splits(spec: TaskSpec, cfg: dict, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    syn = cfg["synthetic"]
    kind = syn["kind"]
    check_synthetic(spec.name, cfg)  # the dry run's check, for the library's callers
    rate = syn.get("trigger_rate", synthetic.TRIGGER_RATE)
    # different seeds so dev never repeats the training draws
    train = synthetic.generate(kind, syn["n_train"], seed, rate)
    dev = synthetic.generate(kind, syn["n_dev"], seed + 1, rate)
    segments = [c for c in train.columns if c.startswith("segment_")]
    names = dict(zip(segments, spec.text_fields, strict=True))
    return train.rename(columns=names), dev.rename(columns=names)


@dataclass(frozen=True)
class Origin:
    """Where a split's rows come from, so that an error can name a row: a file (or a
    generator) and, for a text file, the line each of its rows starts on; a Parquet file's rows
    are named by their index."""

    where: str
    lines: tuple[int, ...] | None = None

    def place(self, row: int) -> str:
        """Row `row` of the source, as a user finds it: its line in a text file, else its index."""
        return f"line {self.lines[row]}" if self.lines is not None else f"row {row}"

    def locate(self, df: pd.DataFrame, row: int) -> str:
        """The source and place of the row at position `row` of `df`, a split read from this
        source or selected from it (then its `source_row` says which row it was)."""
        source = int(df["source_row"].iloc[row]) if "source_row" in df else row
        return f"{self.where}: {self.place(source)}"


def read_local(path: str, encoding: str, key: str) -> tuple[pd.DataFrame, Origin]:
    """The rows of a local file and where each is in it; `encoding` is that of a text file
    (CSV, TSV, JSON lines), read from the config key `key`. One reader for every format, strict
    in all: a header that repeats a column name or leaves one empty, or a row with more fields
    than the header, is an error naming the file, the line and the column (pandas would rename a
    repeated column `review.1`, or take a first column without a name as the index, and go
    on)."""
    try:
        file_format, compression = local_format(path)
    except LookupError as err:
        raise DataError(f"{path} {err}") from None
    if not Path(path).is_file():
        raise DataError(f"{path}: no such file")
    if file_format == "parquet":
        if Path(path).stat().st_size == 0:
            raise DataError(f"{path}: empty file")
        return _read_parquet(path), Origin(path)
    try:
        with open_local(path, compression) as f:
            data = f.read()
    except Exception as err:  # each compression's module raises its own kind of damage
        raise DataError(f"{path}: cannot decompress ({_one_line(err)}); download or compress "
                        "it again") from None
    if not data:
        raise DataError(f"{path}: empty file")
    # utf-8-sig reads UTF-8 with or without a byte-order mark
    codec = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
    try:
        text = data.decode(codec)
    except UnicodeDecodeError as bad:
        raise DataError(_not_decodable(path, data, bad, encoding, key)) from None
    if file_format == "json":
        frame, lines = _json_table(path, text)
    else:
        frame, lines = _csv_table(path, text, "\t" if file_format == "tsv" else ",")
    if frame.empty:
        header = "" if file_format == "json" else "a header and "
        raise DataError(f"{path}: empty split ({header}no rows)")
    return frame, Origin(path, tuple(lines))


def _name_problem(names: list[str], what: str) -> str | None:
    """What is wrong with a header's column names (or a JSON object's keys: `what` "key"): one
    that is empty, or repeats an earlier one; None when nothing is."""
    for number, name in enumerate(names, 1):
        if not str(name).strip():
            return f"{what} {number} has no name; name every column"
        first = names.index(name) + 1
        if first < number:
            return (f"{what} {number} repeats the name {name!r} of {what} {first}; name every "
                    "column once")
    return None


def _check_header(path: str, names: list[str], line: str) -> None:
    """Refuse a header with a `_name_problem`; `line` prefixes the column's place ("line 1: "
    in a text file)."""
    problem = _name_problem(names, "column")
    if problem:
        raise DataError(f"{path}: {line}{problem}")


def _csv_table(path: str, text: str, delimiter: str) -> tuple[pd.DataFrame, list[int]]:
    """The rows of a CSV (or, `delimiter` a tab, TSV) text, and the line each starts on."""
    # a TSV's fields are never quoted (GLUE's hold bare quotes); a CSV's may span lines
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting,
                        strict=True)
    rows, lines = [], []
    try:
        header = next(reader, [])
        _check_header(path, header, "line 1: ")
        start = reader.line_num + 1
        for record in reader:
            if len(record) > len(header):
                raise DataError(f"{path}: line {start}: {len(record)} fields, more than the "
                                f"header's {len(header)} (column {len(header) + 1} has no name)")
            if record:  # a blank line holds no row
                rows.append(record + [""] * (len(header) - len(record)))
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as err:
        raise DataError(f"{path}: line {reader.line_num}: cannot read as CSV ({err})") from None
    frame = pd.DataFrame(rows, columns=header, dtype=object)
    return frame.apply(_typed), lines


def _typed(values: pd.Series) -> pd.Series:
    """A column of a CSV file as values: an empty cell missing, numbers where every filled cell
    is one (labels as integers), text otherwise."""
    values = values.mask(values == "")
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers if numbers.notna().sum() == values.notna().sum() else values


def _keys_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's keys and values, refused with its `_name_problem` (json.loads would keep
    the last value of a repeated key)."""
    problem = _name_problem([key for key, _ in pairs], "key")
    if problem:
        raise DataError(problem)
    return dict(pairs)


def _json_table(path: str, text: str) -> tuple[pd.DataFrame, list[int]]:
    """The rows of a JSON lines text (one object a line), and the line of each."""
    rows, lines = [], []
    # split at newlines only: a JSON string may hold a line separator such as U+2028
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, object_pairs_hook=_keys_once)
        except DataError as err:
            raise DataError(f"{path}: line {number}: {err}") from None
        except ValueError as err:
            raise DataError(f"{path}: line {number}: cannot read as JSON lines "
                            f"({_one_line(err)})") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {number}: {type(row).__name__}, not an object of "
                            "columns (JSON lines: one object a line)")
        rows.append(row)
        lines.append(number)
    return pd.DataFrame(rows), lines


def _not_decodable(path: str, data: bytes, bad: UnicodeDecodeError, encoding: str,
                   key: str) -> str:
    """The line and byte of a file where decoding it failed, and how to read it."""
    # the bytes before the bad one decode, so their newlines count its line in any encoding
    line = data[:bad.start].decode(encoding, errors="replace").count("\n") + 1
    utf16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    if utf16 and codecs.lookup(encoding).name != "utf-16":  # a spreadsheet's "Unicode text"
        fix = f"set {key}: utf-16 (the file starts with UTF-16's byte-order mark)"
    else:
        fix = (f"save the file as UTF-8, or set {key} to the encoding it was saved in "
               "(e.g. latin-1, cp1252, utf-16)")
    return (f"{path}: line {line}: byte {data[bad.start]:#04x} (byte {bad.start} of the file) "
            f"is not valid {encoding}; {fix}")


def _warn_about_classes(train: pd.DataFrame, dev: pd.DataFrame, spec: TaskSpec) -> None:
    """A class that no row has is allowed, but the claims made on such a task mean little."""
    for split, df in (("train", train), ("dev", dev)):
        present = set(df[spec.label_field])
        missing = [name for label, name in enumerate(spec.label_names) if label not in present]
        if missing:
            log.warning("task %s: no %s row has class %s (label_names: %s)%s", spec.name, split,
                        ", ".join(map(repr, missing)), ", ".join(spec.label_names),
                        "; the model cannot learn the task from one class"
                        if split == "train" and len(present) == 1 else "")


def _mixed_splits(
    spec: TaskSpec, parts: Mapping[str, TaskSpec], files: Mapping[str, str | os.PathLike]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The examples of the tasks `parts` (prepared splits in `files`, keyed <task>_<split>),
    with label i for the i-th task."""
    field, splits = spec.text_fields[0], []
    for split in ("train", "dev"):
        frames = []
        for label, (name, part) in enumerate(parts.items()):
            rows = load_split(files[f"{name}_{split}"], part)
            frames.append(pd.DataFrame({field: rows[part.text_fields[0]], spec.label_field: label,
                                        "source_task": name,
                                        "source_row": rows.get("source_row", rows.index)}))
        splits.append(pd.concat(frames, ignore_index=True))
    return splits[0], splits[1]


def read_task(
    name: str,
    cfg: dict[str, Any],
    seed: int,
    files: Mapping[str, str | os.PathLike] | None = None,
    parts: Mapping[str, TaskSpec] | None = None,
) -> tuple[TaskSpec, pd.DataFrame, pd.DataFrame, tuple[Origin, Origin]]:
    """Read or generate a task's train and dev splits, select its examples and validate both
    (`prepare_task`); returns them with where their rows come from (`Origin`, by a row's
    `source_row` where examples were selected). `files` are a hub task's downloaded splits
    (train and, unless its dev is held out, dev) or a mixed task's prepared splits of the tasks
    `parts` it mixes."""
    spec = TaskSpec.from_config(name, cfg)
    source = cfg["source"]
    if source == "synthetic":
        train, dev = _synthetic_splits(spec, cfg, seed)
        origins = (Origin(f"synthetic {name} train"), Origin(f"synthetic {name} dev"))
    elif source == "hub":
        if files is None:
            raise ValueError(f"tasks.{name}: a hub task is read from its downloaded files")
        origins = (Origin(str(files["train"])),
                   Origin(str(files.get("dev", f"{files['train']} (held out)"))))
        train = _read_parquet(files["train"])
        dev = _read_parquet(files["dev"]) if "dev" in files else None
    elif source == "local":
        local = cfg["local"]
        # the schema's default: a config read without it (the library's tests) is UTF-8 too
        encoding = local.get("encoding", "utf-8")
        (train, train_origin), (dev, dev_origin) = (
            read_local(local[split], encoding, f"tasks.{name}.local.encoding")
            for split in ("train", "dev"))
        origins = (train_origin, dev_origin)
    elif source == "mix":
        if files is None or parts is None:
            raise ValueError(f"tasks.{name}: a mixed task is read from its tasks' splits")
        train, dev = _mixed_splits(spec, parts, files)
        origins = tuple(Origin(f"tasks {', '.join(parts)} ({split})") for split in ("train", "dev"))
    else:
        raise ConfigError(f"tasks.{name}.source: {source!r} is not synthetic, hub, local or mix")

    if dev is None or cfg.get("sentences") or cfg.get("rows"):
        # the text columns must be text before they are cut and sorted
        validate_split(train, spec, origins[0])
        if dev is not None:
            validate_split(dev, spec, origins[1])
        train, dev = selection.select(train, dev, cfg, columns=[*spec.text_fields,
                                                                spec.label_field], seed=seed)
    train = validate_split(train, spec, origins[0])
    dev = validate_split(dev, spec, origins[1])
    if cfg.get("shuffle_labels"):
        train, dev = (shuffled_labels(split, spec, seed=[seed, i])
                      for i, split in enumerate((train, dev)))
    _warn_about_classes(train, dev, spec)
    return spec, train, dev, origins


def shuffled_labels(df: pd.DataFrame, spec: TaskSpec, *, seed: list[int]) -> pd.DataFrame:
    """`df` with its labels permuted among its rows (config `shuffle_labels`): the class counts
    stay, and nothing in a row's text predicts its label any more."""
    labels = df[spec.label_field].to_numpy()
    return df.assign(**{spec.label_field: np.random.default_rng(seed).permutation(labels)})


def write_task(
    spec: TaskSpec,
    *,
    train: pd.DataFrame,
    dev: pd.DataFrame,
    train_out: str | os.PathLike,
    dev_out: str | os.PathLike,
) -> dict[str, Any]:
    """Write a task's validated splits. Returns rows and label counts per split."""
    summary = {}
    for split, df, out in (("train", train, train_out), ("dev", dev, dev_out)):
        with atomic_path(out) as tmp:
            df.to_parquet(tmp, engine="pyarrow", compression="zstd", index=False)
        counts = df[spec.label_field].value_counts().sort_index()
        summary[split] = {
            "rows": len(df),
            "label_counts": {spec.label_names[int(k)]: int(v) for k, v in counts.items()},
        }
        log.info("%s %s: %d rows -> %s", spec.name, split, len(df), out)
    return summary


def prepare_task(
    name: str,
    cfg: dict[str, Any],
    seed: int,
    train_out: str | os.PathLike,
    dev_out: str | os.PathLike,
    files: Mapping[str, str | os.PathLike] | None = None,
) -> dict[str, Any]:
    """Read or generate a task's train and dev splits, validate both, then write them (so a bad
    split leaves no files behind).

    `cfg` is one entry of config["tasks"]; a hub task is read from `files`, the Parquet files
    its train and dev splits were downloaded to (`attnlab.data.hub`). Returns rows and label
    counts per split.
    """
    spec, train, dev, _ = read_task(name, cfg, seed, files)
    return write_task(spec, train=train, dev=dev, train_out=train_out, dev_out=dev_out)


def split_texts(df: pd.DataFrame, spec: TaskSpec) -> list[list[str]]:
    """The text columns of a split, in the order a tokenizer takes them (sentence, pair)."""
    return [df[field].tolist() for field in spec.text_fields]


def planted_token_positions(
    df: pd.DataFrame, spec: TaskSpec, tokenizer: PreTrainedTokenizerBase
) -> list[tuple[int, int] | None]:
    """Token positions (in the encoded sequence) of each example's deciding word pair, None
    for an example that has none (its ground-truth columns are null).

    Works from character offsets, so a word split into several subword tokens maps to its
    first token, whatever the tokenizer's pre-tokenization (which may split "ka3" in two).
    """
    missing = [c for c in GROUND_TRUTH_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(
            f"task {spec.name}: no ground-truth columns {', '.join(missing)} "
            "(planted positions exist only for synthetic tasks)"
        )
    if not tokenizer.is_fast:
        raise ValueError("planted_token_positions needs a fast (tokenizers-backed) tokenizer")
    texts = split_texts(df, spec)
    batch = tokenizer(*texts)
    no_pair = df[list(GROUND_TRUTH_COLUMNS)].isna().any(axis=1).to_numpy()
    positions: list[tuple[int, int] | None] = []
    for row in range(len(df)):
        if no_pair[row]:
            positions.append(None)
            continue
        pair = []
        for side in ("a", "b"):
            segment = int(df[f"gt_{side}_segment"].iloc[row])
            word = int(df[f"gt_{side}_word"].iloc[row])
            # synthetic text is words joined by single spaces
            words = texts[segment][row].split(" ")
            char = sum(len(w) + 1 for w in words[:word])
            token = batch.char_to_token(row, char, sequence_index=segment)
            if token is None:
                raise DataError(
                    f"task {spec.name}: idx={df['idx'].iloc[row]} word {words[word]!r} has no "
                    "token (was it truncated or dropped by the tokenizer?)"
                )
            pair.append(token)
        positions.append((pair[0], pair[1]))
    return positions
