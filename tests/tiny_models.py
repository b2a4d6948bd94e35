"""Tiny random sequence classifiers of every supported family (and one unsupported), built
locally from configs so the tests need no download."""

from __future__ import annotations

import torch
from transformers import (
    BartConfig,
    BartForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    DebertaV2Config,
    DebertaV2ForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    ElectraConfig,
    ElectraForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

FAMILIES = ("bert", "roberta", "electra", "distilbert", "bart")
VOCAB = 40


def _config(family: str, init: float):
    common = {"vocab_size": VOCAB, "num_labels": 3, "initializer_range": init}
    if family == "bert":
        return BertForSequenceClassification, BertConfig(
            hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
            **common)
    if family == "roberta":
        return RobertaForSequenceClassification, RobertaConfig(
            hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
            pad_token_id=1, max_position_embeddings=40, **common)
    if family == "electra":
        return ElectraForSequenceClassification, ElectraConfig(
            embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=48, **common)
    if family == "distilbert":
        return DistilBertForSequenceClassification, DistilBertConfig(
            dim=32, n_layers=3, n_heads=4, hidden_dim=48, **common)
    if family == "bart":
        return BartForSequenceClassification, BartConfig(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
            max_position_embeddings=40, init_std=init, **common)
    if family == "deberta-v2":
        return DebertaV2ForSequenceClassification, DebertaV2Config(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            **common)
    raise ValueError(family)


def tiny_classifier(family: str, seed: int = 0, init: float = 0.1, dtype=torch.float32):
    """A random eval-mode classifier with eager attention. `init` is larger than the usual 0.02
    so that F(αA) varies enough for attribution errors to be measurable in float32."""
    cls, config = _config(family, init)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return cls(config).to(dtype).eval()


def tiny_batch(family: str, lengths=(9, 6, 8), seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded random token ids with the family's special tokens where they matter
    (BART's classifier reads the last </s>, RoBERTa's positions skip the pad id)."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    pad, eos = (1, 2) if family in ("roberta", "bart") else (0, 3)
    ids = torch.full((len(lengths), width), pad)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, VOCAB, (n,), generator=g)
        ids[row, 0], ids[row, n - 1] = 0 if family in ("roberta", "bart") else 2, eos
        mask[row, :n] = 1
    labels = torch.arange(len(lengths)) % 3
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
