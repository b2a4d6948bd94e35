"""The tokenizer a task's model reads with, and the refusal of an example too long for it (or
of a next-token target of several tokens).

A scratch model gets a word-level BERT tokenizer over the words of its training split; a
pretrained or fine-tuned checkpoint brings its own. This module needs no torch, so the data
jobs that use it start in a second or two.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from transformers import BertTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from attnlab.data.prompts import PromptSpec
from attnlab.data.tasks import DataError, Origin, TaskSpec, split_texts

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# a scratch decoder's: padding, unknown words, and the beginning of every sequence (a token
# every position can attend to, which heads with nothing to read use)
CAUSAL_SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>")


def build_tokenizer(words: list[str]) -> PreTrainedTokenizerBase:
    """A word-level BERT tokenizer: the special tokens, then `words` (lowercased), one id each."""
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *(w.lower() for w in words)):
        vocab.setdefault(token, len(vocab))
    return BertTokenizer(vocab=vocab)


def build_causal_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer for a decoder built from scratch: words split at whitespace, one
    id each (after CAUSAL_SPECIAL_TOKENS), every sequence starting with <s>."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab: dict[str, int] = {}
    for token in (*CAUSAL_SPECIAL_TOKENS, *words):
        vocab.setdefault(token, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", pad_token="<pad>",
                                   unk_token="<unk>")


def causal_tokenizer(
    spec: PromptSpec, model_cfg: Mapping[str, Any], train: pd.DataFrame
) -> PreTrainedTokenizerBase:
    """The tokenizer of a decoder trained or evaluated on `train`: a word-level one over its
    prompts' and targets' words for a scratch model, the checkpoint's own otherwise (padding
    with its end-of-text token where it has no padding token: GPT-2's and Llama's)."""
    if model_cfg["source"] == "scratch":
        return build_causal_tokenizer(sorted(
            {word for column in (spec.prompt_field, spec.target_field)
             for text in train[column] for word in text.split()}))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_cfg["pretrained"],
                                              gguf_file=model_cfg.get("gguf_file"))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def training_words(df: pd.DataFrame, spec: TaskSpec) -> list[str]:
    """The distinct words of a split's text, as the BERT tokenizer splits them, sorted."""
    backend = build_tokenizer([]).backend_tokenizer
    words: set[str] = set()
    for field in spec.text_fields:
        for text in df[field]:
            pieces = backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))
            words.update(word for word, _ in pieces)
    return sorted(words)


def model_tokenizer(
    spec: TaskSpec, model_cfg: dict[str, Any], train: pd.DataFrame
) -> PreTrainedTokenizerBase:
    """The tokenizer of the model fine-tuned on `train`: a word-level one over its words for a
    scratch model, the checkpoint's own otherwise."""
    if model_cfg["source"] == "scratch":
        return build_tokenizer(training_words(train, spec))
    # AutoTokenizer imports every model family's configuration: seconds a scratch run never needs
    from transformers import AutoTokenizer

    # a GGUF file holds its tokenizer (model.gguf_file; absent from a model section built by hand)
    return AutoTokenizer.from_pretrained(model_cfg["pretrained"],
                                         gguf_file=model_cfg.get("gguf_file"))


def length_limit(model_cfg: Mapping[str, Any]) -> tuple[int, bool]:
    """(model.max_length, model.truncate) of config["model"]: the one place every encoding and
    length check reads them (truncate is False when not given)."""
    return model_cfg["max_length"], model_cfg.get("truncate", False)


def check_lengths(
    df: pd.DataFrame,
    spec: TaskSpec,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    origin: Origin | None = None,
) -> None:
    """Refuse (`DataError`) a split with an example of more than `max_length` tokens, naming
    where it is: its row in `origin` (by `source_row` where examples were selected from it), or
    its idx in the task when no origin is given."""
    lengths = np.array([len(ids) for ids in tokenizer(*split_texts(df, spec))["input_ids"]])
    too_long = np.flatnonzero(lengths > max_length)
    if not len(too_long):
        return
    row = int(too_long[0])
    if origin is None:
        where = f"task {spec.name}: example idx={df['idx'].iloc[row] if 'idx' in df else row}"
    else:
        where = origin.locate(df, row)
    raise DataError(
        f"{where} is {int(lengths[row])} tokens, more than model.max_length={max_length} "
        f"({len(too_long)} such examples); raise model.max_length or set model.truncate: true"
    )


def check_prompt_lengths(
    df: pd.DataFrame,
    spec: PromptSpec,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    origin: Origin,
) -> None:
    """Refuse (`DataError`) a next-token split with a prompt that, with its target's first
    token after it (as attnlab.engine.next_token encodes it), is more than `max_length` tokens,
    naming its row in `origin`. Prompts are never truncated: cut, the query would be lost."""
    lengths = np.array([len(ids) + 1 for ids in tokenizer(df[spec.prompt_field].tolist())
                        ["input_ids"]])
    too_long = np.flatnonzero(lengths > max_length)
    if len(too_long):
        row = int(too_long[0])
        raise DataError(
            f"{origin.locate(df, row)} is {int(lengths[row])} tokens with its target, more than "
            f"model.max_length={max_length} ({len(too_long)} such prompts); raise "
            "model.max_length (a prompt is never truncated)")


def check_targets(
    df: pd.DataFrame,
    spec: PromptSpec,
    tokenizer: PreTrainedTokenizerBase,
    origin: Origin,
    *,
    first_token: bool = False,
) -> None:
    """Refuse (`DataError`) a next-token split with a target of more than one token after its
    prompt and a space (attnlab.engine.next_token predicts and attributes its first token only),
    naming its row in `origin` and the target's tokens; with `first_token` (config
    tasks.<name>.target_tokens: first), log how many rows have one and go on."""
    prompts = df[spec.prompt_field].tolist()
    targets = df[spec.target_field].tolist()
    continued = tokenizer([f"{p} {t}" for p, t in zip(prompts, targets, strict=True)])
    special = set(tokenizer.all_special_ids)
    pieces = [[token for token in ids[len(alone):] if token not in special]
              for ids, alone in zip(continued["input_ids"], tokenizer(prompts)["input_ids"],
                                    strict=True)]
    longer = [row for row, tokens in enumerate(pieces) if len(tokens) > 1]
    if not longer:
        return
    if first_token:
        log.warning("task %s: %s: %d of %d targets are more than one token; the first token of "
                    "each is predicted and attributed (tasks.%s.target_tokens: first)",
                    spec.name, origin.where, len(longer), len(df), spec.name)
        return
    row = longer[0]
    tokens = [tokenizer.decode([token]) for token in pieces[row]]
    raise DataError(
        f"{origin.locate(df, row)}: target {targets[row]!r} is {len(tokens)} tokens {tokens}, "
        f"and only a target's first token is predicted ({len(longer)} such rows); give one-token "
        f"targets, or set tasks.{spec.name}.target_tokens: first to predict the first token of "
        "each")
