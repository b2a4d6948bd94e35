"""A task's examples as a model sees them: the first n of a split, tokenized; in batches; the
positions of special tokens; the model's predictions and accuracy on them; which of them a
stage uses. Shared by the stages that run a fine-tuned model on a split."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
import torch
from transformers import BatchEncoding, PreTrainedModel, PreTrainedTokenizerBase

from attnlab.data.prompts import PromptSpec
from attnlab.data.tasks import TaskSpec, load_split, split_texts
from attnlab.data.tokenization import check_lengths, length_limit
from attnlab.engine import models, next_token
from attnlab.engine.intervention import Intervention

log = logging.getLogger(__name__)


def tokenized(
    df: pd.DataFrame,
    spec: TaskSpec,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    truncate: bool = False,
) -> BatchEncoding:
    """Tokenize a split (single sentences or pairs), padded to its longest example, as tensors:
    input_ids, attention_mask and token_type_ids (when the tokenizer has them), and (a fast
    tokenizer's) the segment and word of each token. An example longer than `max_length` is an
    error unless `truncate` is set."""
    if not truncate:
        check_lengths(df, spec, tokenizer, max_length)
    return tokenizer(*split_texts(df, spec), padding="longest", truncation=truncate,
                     max_length=max_length if truncate else None, return_tensors="pt")


def _inputs(batch: BatchEncoding, df: pd.DataFrame, spec: TaskSpec) -> dict[str, torch.Tensor]:
    """A tokenized split's model inputs with its labels."""
    encoded = {key: batch[key] for key in ("input_ids", "attention_mask", "token_type_ids")
               if key in batch}
    encoded["labels"] = torch.tensor(df[spec.label_field].to_numpy(), dtype=torch.long)
    return encoded


def encode(
    df: pd.DataFrame,
    spec: TaskSpec,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    truncate: bool = False,
) -> dict[str, torch.Tensor]:
    """A split `tokenized`: input_ids, attention_mask, token_type_ids (when the tokenizer has
    them) and labels."""
    return _inputs(tokenized(df, spec, tokenizer, max_length, truncate), df, spec)


def encoded_examples(
    path: str | os.PathLike,
    spec: TaskSpec | PromptSpec,
    tokenizer: PreTrainedTokenizerBase,
    model_cfg: Mapping[str, Any],
    n: int | None = None,
) -> dict[str, torch.Tensor]:
    """The first `n` examples (all when None) of a split, tokenized for the model as
    `encoded_texts` does under config["model"]'s length rule."""
    df = load_split(path, spec)
    return encoded_frame(df.iloc[:n] if n is not None else df, spec, tokenizer, model_cfg)


def encoded_texts(
    df: pd.DataFrame,
    spec: TaskSpec | PromptSpec,
    tokenizer: PreTrainedTokenizerBase,
    model_cfg: Mapping[str, Any],
) -> tuple[dict[str, torch.Tensor], BatchEncoding]:
    """The examples (rows) of a split already read, tokenized once under config["model"]'s
    length rule (`length_limit`): the model's inputs, and the encoding they come from (the
    segment and word of each token; a next-token task's: of the prompt's tokens). A next-token
    task's prompts are right-padded and read at their last token, and their labels are the
    target tokens (`next_token.prompt_inputs`): every stage that runs a model on them then runs
    a decoder as it runs a classifier."""
    max_length, truncate = length_limit(model_cfg)
    if isinstance(spec, PromptSpec):  # model.truncate is refused for them (config check)
        data, prompts = next_token.tokenized_prompts(df, spec, tokenizer, max_length)
        return next_token.prompt_inputs(data), prompts
    batch = tokenized(df, spec, tokenizer, max_length, truncate)
    return _inputs(batch, df, spec), batch


def encoded_frame(
    df: pd.DataFrame,
    spec: TaskSpec | PromptSpec,
    tokenizer: PreTrainedTokenizerBase,
    model_cfg: Mapping[str, Any],
) -> dict[str, torch.Tensor]:
    """The examples (rows) of a split already read, tokenized for the model as
    `encoded_texts` does."""
    return encoded_texts(df, spec, tokenizer, model_cfg)[0]


def special_tokens_mask(
    input_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase
) -> torch.Tensor:
    """True where `input_ids` holds a special token ([CLS], [SEP], <s>, </s>, padding, ...)."""
    return torch.isin(input_ids, torch.tensor(tokenizer.all_special_ids, device=input_ids.device))


# The largest share of a batch's token slots that padding may take: examples sorted by length
# (`by_length`) then run in batches of similar lengths even where the config's batch size would
# hold them all (one batch of 50 sentences of 5 to 58 tokens is half padding; its attention,
# quadratic in the width, three quarters).
PADDING = 0.25


def batches(
    inputs: dict[str, torch.Tensor], batch_size: int, device: torch.device | str = "cpu", *,
    padding: float = PADDING,
) -> Iterator[tuple[slice, dict[str, torch.Tensor]]]:
    """Consecutive row blocks of a tokenized split, each trimmed to its own longest example
    (right padding) and moved to `device`: at most `batch_size` rows, and a block ends before
    the row that would make more than `padding` of its token slots padding (1: never; a block
    holds at least one row)."""
    lengths = inputs["attention_mask"].sum(dim=1).tolist()
    start = 0
    while start < len(lengths):
        end, width, real = start + 1, lengths[start], lengths[start]
        while end < len(lengths) and end - start < batch_size:
            wider = max(width, lengths[end])
            if real + lengths[end] < (1 - padding) * wider * (end + 1 - start):
                break
            end, width, real = end + 1, wider, real + lengths[end]
        rows = slice(start, end)
        yield rows, {k: (v[rows, :width] if v.dim() == 2 else v[rows]).to(device)
                     for k, v in inputs.items()}
        start = end


def by_length(inputs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The examples shortest first, and that order (their indices in `inputs`): batches of
    similar lengths carry little padding, as `batches` trims each to its longest."""
    order = inputs["attention_mask"].sum(dim=1).argsort(stable=True)
    return {key: value[order] for key, value in inputs.items()}, order


def in_input_order(values: torch.Tensor, order: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """`values` computed in `by_length`'s order, put back in the order of the inputs."""
    return torch.empty_like(values).index_copy_(dim, order.to(values.device), values)


def predict(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    head_mask: torch.Tensor | None = None,
    batch_size: int = 64,
) -> torch.Tensor:
    """Logits (N, C) of every example; head_mask is (L, H) for all examples or (N, L, H)."""
    device = next(model.parameters()).device
    inputs, order = by_length(inputs)
    if head_mask is not None and head_mask.dim() == 3:
        head_mask = head_mask[order]
    out = []
    with torch.no_grad():
        for rows, batch in batches(inputs, batch_size, device):
            mask = None
            if head_mask is not None:
                mask = (head_mask if head_mask.dim() == 2 else head_mask[rows]).to(device)
            out.append(models.logits(model, batch, Intervention(head_mask=mask)))
    return in_input_order(torch.cat(out).cpu(), order)


def outcomes(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    head_masks: torch.Tensor,
    batch_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Under each of M head masks, whether each example's prediction is its gold label (1/0)
    and the gold label's probability: (M, N) each, float64. head_masks is (M, L, H), each mask
    for every example, or (M, N, L, H), a row per example; identical masks run once, and each
    pass starts at its mask's first layer with a masked head (`_masked_logits`)."""
    device = next(model.parameters()).device
    distinct, index = head_masks.unique(dim=0, return_inverse=True)
    inputs, order = by_length(inputs)
    per_example = distinct.dim() == 4
    if per_example:
        distinct = distinct[:, order]
    out = []  # per batch: (2, distinct masks, B)
    with torch.no_grad():
        for rows, batch in batches(inputs, batch_size, device):
            masks = (distinct[:, rows] if per_example else distinct).to(device)
            out.append(torch.stack([_gold_outcome(logits, batch["labels"])
                                    for logits in _masked_logits(model, batch, masks)], dim=1))
    correct, prob = in_input_order(torch.cat(out, dim=2).cpu(), order, dim=2)[:, index]
    return correct, prob


def _gold_outcome(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(2, B): whether each prediction is the gold label (1/0), and the gold label's
    probability (computed in float64)."""
    prob = torch.softmax(logits.double(), dim=-1).gather(1, labels[:, None])[:, 0]
    return torch.stack([(logits.argmax(-1) == labels).double(), prob])


def _masked_logits(
    model: PreTrainedModel, batch: dict[str, torch.Tensor], head_masks: torch.Tensor
) -> Iterator[torch.Tensor]:
    """The logits of `batch` under each of `head_masks` ((L, H) or (B, L, H) each), in turn.

    A mask that keeps every head of layers 0..l-1 leaves the hidden states entering layer l as
    the unmasked model's. Where the family can be run from a hidden state (`Family.split`),
    those are computed once for the batch, up to the latest layer a mask starts at, and each
    mask's pass runs only the layers from its first masked one; other families (BART's
    classifier) run every pass whole.
    """
    if not models.family_of(model).split:
        for mask in head_masks:
            yield models.logits(model, batch, Intervention(head_mask=mask))
        return
    starts = [_first_masked_layer(mask) for mask in head_masks]
    states = [models.embed(model, batch)]  # states[l]: the unmasked ones entering layer l
    context = models.layer_inputs(model, states[0], batch["attention_mask"])
    for layer in range(max(starts)):
        states.append(models.run_layers(model, states[layer], context, layer, layer + 1))
    for mask, start in zip(head_masks, starts, strict=True):
        hidden = models.run_layers(model, states[start], context, start, None,
                                   Intervention(head_mask=mask))
        yield models.classify(model, hidden, batch["attention_mask"])


def _first_masked_layer(head_mask: torch.Tensor) -> int:
    """The first layer in which `head_mask` ((L, H) or (B, L, H)) changes a head of some
    example; L where it changes none."""
    changed = (head_mask != 1).any(dim=-1).reshape(-1, head_mask.shape[-2]).any(dim=0)
    layers = changed.nonzero().flatten()
    return int(layers[0]) if len(layers) else len(changed)


def accuracy(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    head_mask: torch.Tensor | None = None,
    batch_size: int = 64,
) -> float:
    """Share of examples whose prediction is the gold label."""
    predictions = predict(model, inputs, head_mask, batch_size).argmax(dim=-1)
    return float((predictions == inputs["labels"]).double().mean())


def chance(labels: torch.Tensor) -> float:
    """The majority-class rate of `labels`: what a model that ignores its input reaches by
    answering the commonest class on these examples. A uniform 1/C would understate it on an
    unbalanced split, and a model pruned to nothing, or never trained, tends to answer one
    class."""
    return float(torch.bincount(labels).max() / len(labels))


def held_out(n_requested: int, n_available: int) -> int:
    """How many examples to score heads on: the requested number, or all there are."""
    if n_available < n_requested:
        log.warning("head importance: %d held-out examples requested but only %d attributed; "
                    "using %d", n_requested, n_available, n_available)
    return min(n_requested, n_available)
