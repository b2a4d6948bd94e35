"""Next-token tasks are data too: a prompt column and a target column, in two Parquet splits.

A next-token task (config tasks.<name>.kind: next_token) comes from the planted induction
generator (attnlab.data.induction) or from local files (Parquet, CSV, JSON lines) of prompts
and their targets, read as classification tasks' local files are. The target is the text that
follows the prompt after one space; attnlab.engine.next_token tokenizes both.
"""

from __future__ import annotations

import os
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


def read_prompts(name: str, cfg: dict[str, Any], seed: int
                 ) -> tuple[PromptSpec, pd.DataFrame, pd.DataFrame, tuple[Origin, Origin]]:
    """A next-token task's train and dev splits, generated (synthetic kind induction or
    repeat, dev drawn with seed + 1) or read from local files, validated, with where each
    split's rows come from (for the length check of prepare_data)."""
    spec = PromptSpec.from_config(name, cfg)
    if cfg["source"] == "synthetic":
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
                          "synthetic or local")
    return (spec, validate_prompts(train, spec, origins[0]),
            validate_prompts(dev, spec, origins[1]), origins)


def write_prompts(*, train: pd.DataFrame, dev: pd.DataFrame, train_out: str | os.PathLike,
                  dev_out: str | os.PathLike) -> dict[str, Any]:
    """Write a next-token task's validated splits; returns the rows of each."""
    for df, out in ((train, train_out), (dev, dev_out)):
        with atomic_path(out) as tmp:
            df.to_parquet(tmp, engine="pyarrow", compression="zstd", index=False)
    return {"train": {"rows": len(train)}, "dev": {"rows": len(dev)}}
