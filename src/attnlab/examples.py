"""A task's examples as a model sees them: the first n of a split, tokenized; in batches; the
positions of special tokens. Shared by the stages that run a fine-tuned model on a split."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from attnlab.tasks import TaskSpec, encode, load_split


def encoded_examples(
    path: str | os.PathLike,
    spec: TaskSpec,
    tokenizer: PreTrainedTokenizerBase,
    model_cfg: dict[str, Any],
    n: int | None = None,
) -> dict[str, torch.Tensor]:
    """The first `n` examples (all when None) of a split, tokenized for the model as `encode`
    does with config["model"]'s max_length and truncate."""
    df = load_split(path, spec)
    df = df.iloc[:n] if n is not None else df
    return encode(df, spec, tokenizer, model_cfg["max_length"], model_cfg.get("truncate", False))


def special_tokens_mask(
    input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase
) -> torch.Tensor:
    """True where `input_ids` holds a special token ([CLS], [SEP], <s>, </s>, padding, ...)."""
    return torch.isin(input_ids, torch.tensor(tokenizer.all_special_ids, device=input_ids.device))


def batches(
    inputs: dict[str, torch.Tensor], batch_size: int, device: torch.device | str = "cpu"
) -> Iterator[tuple[slice, dict[str, torch.Tensor]]]:
    """Consecutive row blocks of a tokenized split, each trimmed to its own longest example
    (right padding) and moved to `device`."""
    n = len(inputs["input_ids"])
    for start in range(0, n, batch_size):
        rows = slice(start, min(start + batch_size, n))
        width = int(inputs["attention_mask"][rows].sum(dim=1).max())
        yield rows, {k: (v[rows, :width] if v.dim() == 2 else v[rows]).to(device)
                     for k, v in inputs.items()}
