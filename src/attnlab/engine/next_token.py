"""Next-token tasks of a decoder language model: prompts, their target tokens, and accuracy.

An example is a prompt and a target; the target follows the prompt after one space (" Paris"
after "The capital of France is", as GPT-2's tokenizer reads a next word), and the task's
target token is the first token of that continuation. The model's prediction is its argmax
next token at the prompt's last token (the query position). Padding is on the right, so the
positions of every token are those of the example alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import torch
from transformers import BatchEncoding, PreTrainedModel, PreTrainedTokenizerBase

from attnlab.data.prompts import PromptSpec
from attnlab.data.tasks import DataError


def encode_prompts(
    df: pd.DataFrame, spec: PromptSpec, tokenizer: PreTrainedTokenizerBase, max_length: int
) -> dict[str, torch.Tensor]:
    """The prompts with their continuations, tokenized and right-padded.

    Returns input_ids and attention_mask of the prompt followed by the target's first token
    (the model reads all but the last), `query` (the prompt's last position), `target` (the
    target token's id) and `train_from` (the first position whose next token is trained: the
    start of the repeat in the induction task, whose repeated words are all predictable; the
    query otherwise)."""
    return tokenized_prompts(df, spec, tokenizer, max_length)[0]


def tokenized_prompts(
    df: pd.DataFrame, spec: PromptSpec, tokenizer: PreTrainedTokenizerBase, max_length: int
) -> tuple[dict[str, torch.Tensor], BatchEncoding]:
    """`encode_prompts`'s tensors, and the encoding of the prompts alone they were cut from
    (the words of each prompt token)."""
    prompts = df[spec.prompt_field].tolist()
    continued = tokenizer([f"{p} {t}" for p, t in zip(prompts, df[spec.target_field],
                                                         strict=True)])["input_ids"]
    encoding = tokenizer(prompts)
    alone = encoding["input_ids"]
    rows, queries = [], []
    for row, (ids, prompt_ids) in enumerate(zip(continued, alone, strict=True)):
        n = len(prompt_ids)
        if ids[:n] != prompt_ids or len(ids) == n:
            raise DataError(f"task {spec.name}: row {row}: the prompt's tokens change when its "
                            "target follows it; the target must start a new token")
        if n + 1 > max_length:
            raise DataError(f"task {spec.name}: row {row} is {n + 1} tokens with its target, "
                            f"more than model.max_length={max_length}")
        rows.append(ids[: n + 1])
        queries.append(n - 1)
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, ids in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
    query = torch.tensor(queries)
    if "repeat_start" in df.columns:
        train_from = torch.tensor(token_positions(df, spec, tokenizer, "repeat_start"))
    else:
        train_from = query.clone()
    return {"input_ids": input_ids, "attention_mask": attention_mask, "query": query,
            "target": input_ids[torch.arange(len(rows)), query + 1],
            "train_from": train_from}, encoding


def token_positions(
    df: pd.DataFrame, spec: PromptSpec, tokenizer: PreTrainedTokenizerBase, column: str
) -> list[int]:
    """The token position of the word at each row's word position `column` of its prompt (words
    separated by single spaces), by character offsets: a word split into several tokens maps
    to its first."""
    if not tokenizer.is_fast:
        raise ValueError("token_positions needs a fast (tokenizers-backed) tokenizer")
    prompts = df[spec.prompt_field].tolist()
    batch = tokenizer(prompts)
    positions = []
    for row, (prompt, word) in enumerate(zip(prompts, df[column], strict=True)):
        char = sum(len(w) + 1 for w in prompt.split(" ")[: int(word)])
        token = batch.char_to_token(row, char)
        if token is None:
            raise DataError(f"task {spec.name}: row {row}: word {int(word)} of the prompt has "
                            "no token")
        positions.append(token)
    return positions


def planted_pairs(
    df: pd.DataFrame, spec: PromptSpec, tokenizer: PreTrainedTokenizerBase
) -> list[tuple[int, int]]:
    """The (query, key) token pair that decides each example of the induction task: its last
    prompt token (the second A) reading B's first position (`gt_induction`), as a
    classification task's planted pair decides its label."""
    lengths = [len(ids) for ids in tokenizer(df[spec.prompt_field].tolist())["input_ids"]]
    keys = token_positions(df, spec, tokenizer, "gt_induction")
    return [(n - 1, key) for n, key in zip(lengths, keys, strict=True)]


def batches(data: dict[str, torch.Tensor], rows: torch.Tensor, size: int,
            device: torch.device | str) -> Iterator[dict[str, torch.Tensor]]:
    """The rows `rows` of `data` in batches of `size`, cut to their longest example."""
    for start in range(0, len(rows), size):
        chosen = rows[start : start + size]
        width = int(data["attention_mask"][chosen].sum(dim=1).max())
        yield {key: (value[chosen, :width] if value.dim() == 2 else value[chosen]).to(device)
               for key, value in data.items()}


def query_logits(model: PreTrainedModel, batch: dict[str, torch.Tensor],
                 **forward: Any) -> torch.Tensor:
    """The next-token logits at each example's query position (`forward`: more arguments of
    the model's forward, e.g. the attention intervention)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   **forward).logits
    return logits[torch.arange(len(logits), device=logits.device), batch["query"]]


@torch.no_grad()
def correct(model: PreTrainedModel, data: dict[str, torch.Tensor], batch_size: int,
            device: torch.device | str, **forward: Any) -> torch.Tensor:
    """Whether each example's argmax next token at its query is its target (bool, per row)."""
    model.eval()
    hits = []
    for batch in batches(data, torch.arange(len(data["query"])), batch_size, device):
        hits.append((query_logits(model, batch, **forward).argmax(-1) == batch["target"]).cpu())
    return torch.cat(hits)


def accuracy(model: PreTrainedModel, data: dict[str, torch.Tensor], batch_size: int,
             device: torch.device | str, **forward: Any) -> float:
    """Next-token accuracy: the share of examples whose argmax next token is their target."""
    return float(correct(model, data, batch_size, device, **forward).float().mean())


def prompt_inputs(data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The prompts alone, as the attribution engine and `models.logits` take a decoder's
    examples: the target token becomes padding (the model reads the last real token, the
    query; the ids there stay, masked out) and `labels` are the targets."""
    index = torch.arange(data["input_ids"].shape[1])
    real = index[None, :] <= data["query"][:, None]
    width = int(data["query"].max()) + 1
    return {"input_ids": data["input_ids"][:, :width],
            "attention_mask": (data["attention_mask"].bool() & real).long()[:, :width],
            "labels": data["target"]}
