"""Next-token tasks are data too: a prompt column and a target column, in two Parquet splits.

A next-token task (config tasks.<name>.kind: next_token) comes from the planted induction
generator (attnlab.data.induction) or from local files (Parquet, CSV, JSON lines) of prompts
and their targets, read as classification tasks' local files are. The target is the text that
follows the prompt after one space; attnlab.engine.next_token tokenizes both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from attnlab.data import induction
from attnlab.data.tasks import DataError, Origin, read_local
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.outputs import atomic_path
from attnlab.plumbing.preflight import NEXT_TOKEN_KINDS


@dataclass(frozen=True)
class PromptSpec:
    """A next-token task: its name and the columns of its prompt and target."""

    name: str
    prompt_field: str = "text"
    target_field: str = "target"

    @classmethod
    def from_config(cls, name: str, cfg: dict[str, Any]) -> PromptSpec:
        """Build from one entry of config["tasks"] (kind next_token)."""
        if len(cfg["text_fields"]) != 1:
            raise ConfigError(f"tasks.{name}.text_fields: a next-token task has one prompt "
                              f"column, got {cfg['text_fields']}")
        # the schema fills in no default: absent (or passed on as None), it is "target"
        return cls(name, cfg["text_fields"][0], cfg.get("target_field") or "target")

    def validate(self, df: pd.DataFrame, where: str) -> pd.DataFrame:
        """`validate_prompts` of this task."""
        return validate_prompts(df, self, Origin(where))


def validate_prompts(df: pd.DataFrame, spec: PromptSpec, origin: Origin) -> pd.DataFrame:
    """Check that `df` has text prompts and targets; `origin` names its rows in errors."""
    if df.empty:
        raise DataError(f"{origin.where}: empty split (no rows)")
    for column in (spec.prompt_field, spec.target_field):
        if column not in df.columns:
            raise DataError(f"{origin.where}: missing column {column!r} (columns are "
                            f"{', '.join(map(str, df.columns))})")
        bad = ~df[column].map(lambda value: isinstance(value, str) and value.strip() != "")
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise DataError(f"{origin.locate(df, row)}: column {column!r} is not a non-empty "
                            "text")
    return df


def read_prompts(name: str, cfg: dict[str, Any], seed: int,
                 files: Mapping[str, str | os.PathLike] | None = None
                 ) -> tuple[PromptSpec, pd.DataFrame, pd.DataFrame, tuple[Origin, Origin]]:
    """A next-token task's train and dev splits, generated (synthetic kind induction or
    repeat, dev drawn with seed + 1), made of real sentences (`repeated_text`) or read from
    local files, validated, with where each split's rows come from (for the length check of
    prepare_data). `files`: a hub task's downloaded splits."""
    spec = PromptSpec.from_config(name, cfg)
    if "repeat" in cfg:
        train, dev, origins = repeated_text(spec, cfg, seed, files)
    elif cfg["source"] == "synthetic":
        syn = cfg["synthetic"]
        if syn["kind"] not in NEXT_TOKEN_KINDS:
            raise ConfigError(f"tasks.{name}.synthetic.kind: {syn['kind']!r} is a "
                              "classification task; a next_token task's is "
                              f"{' or '.join(NEXT_TOKEN_KINDS)}")
        layout = (induction.repeat(syn["length"]) if syn["kind"] == "repeat"
                  else induction.PLANTED)
        train = induction.generate(syn["n_train"], seed, layout)
        dev = induction.generate(syn["n_dev"], seed + 1, layout)
        frames = {"text": spec.prompt_field, "target": spec.target_field}
        train, dev = train.rename(columns=frames), dev.rename(columns=frames)
        origins = (Origin(f"synthetic {name} train"), Origin(f"synthetic {name} dev"))
    elif cfg["source"] == "local":
        local = cfg["local"]
        (train, train_origin), (dev, dev_origin) = (
            read_local(local[split], local.get("encoding", "utf-8"),
                       f"tasks.{name}.local.encoding") for split in ("train", "dev"))
        origins = (train_origin, dev_origin)
    else:
        raise ConfigError(f"tasks.{name}.source: {cfg['source']!r}; a next_token task is "
                          f"synthetic or local, or hub with tasks.{name}.repeat")
    return (spec, validate_prompts(train, spec, origins[0]),
            validate_prompts(dev, spec, origins[1]), origins)


def repeated_text(spec: PromptSpec, cfg: dict[str, Any], seed: int,
                  files: Mapping[str, str | os.PathLike] | None
                  ) -> tuple[pd.DataFrame, pd.DataFrame, tuple[Origin, Origin]]:
    """The train and dev prompts of a task of real sentences (tasks.<name>.repeat: the
    standard protocol, attnlab.data.induction.repeated_sentences) in the prompt column of a hub
    task's downloaded splits (`files`) or of its local files: dev from the dev split where the
    task has one, else from sentences of the train split that no train prompt holds."""
    settings = cfg["repeat"]
    paths = dict(files or {}) if cfg["source"] == "hub" else cfg["local"]
    encoding = cfg.get("local", {}).get("encoding", "utf-8")
    sentences, where = {}, {}
    for split in ("train", "dev"):
        if split not in paths:
            continue
        frame, origin = read_local(str(paths[split]), encoding,
                                   f"tasks.{spec.name}.local.encoding")
        if spec.prompt_field not in frame.columns:
            raise DataError(f"{origin.where}: missing column {spec.prompt_field!r} (columns are "
                            f"{', '.join(map(str, frame.columns))})")
        # sorted and unique: the draw depends neither on the source's order nor on its repeats
        sentences[split] = sorted({text for text in frame[spec.prompt_field]
                                   if isinstance(text, str)})
        where[split] = origin.where
    if "dev" in sentences:
        pools = {split: induction.repeated_sentences(sentences[split], settings["length"],
                                                     seed + (split == "dev"))
                 for split in ("train", "dev")}
    else:
        drawn = induction.repeated_sentences(sentences["train"], settings["length"], seed)
        pools = {"train": drawn.iloc[: settings["n_train"]],
                 "dev": drawn.iloc[settings["n_train"] :]}
        where["dev"] = f"{where['train']} (the sentences no train prompt holds)"
    splits = []
    for split in ("train", "dev"):
        n = settings[f"n_{split}"]
        if len(pools[split]) < n:
            raise DataError(f"tasks.{spec.name}.repeat.n_{split}: {n} {split} prompts asked "
                            f"for, and {where[split]} has {len(pools[split])} sentences with "
                            f"{settings['length']} consecutive distinct words of letters")
        frame = pools[split].iloc[:n].assign(idx=range(n)).reset_index(drop=True)
        splits.append(frame.rename(columns={"text": spec.prompt_field,
                                            "target": spec.target_field}))
    return splits[0], splits[1], (Origin(f"{where['train']}, repeat prompts"),
                                  Origin(f"{where['dev']}, repeat prompts"))


def write_prompts(*, train: pd.DataFrame, dev: pd.DataFrame, train_out: str | os.PathLike,
                  dev_out: str | os.PathLike) -> dict[str, Any]:
    """Write a next-token task's validated splits; returns the rows of each."""
    for df, out in ((train, train_out), (dev, dev_out)):
        with atomic_path(out) as tmp:
            df.to_parquet(tmp, engine="pyarrow", compression="zstd", index=False)
    return {"train": {"rows": len(train)}, "dev": {"rows": len(dev)}}
