"""Tiny random sequence classifiers and decoder language models of every supported family (and
one unsupported of each kind), built locally from configs so the tests need no download."""

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
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoConfig,
    GPTNeoForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from attnlab.plumbing.families import CLASSIFIER, DECODER, names

FAMILIES = names(CLASSIFIER)
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


# tiny_batch's lengths where batching is under test: in batches of 4, every batch padded and
# the last one short.
LENGTHS = (9, 6, 8, 7, 9, 5)


def without_labels(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch without its labels: what the model itself reads."""
    return {k: v for k, v in batch.items() if k != "labels"}


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


CAUSAL_FAMILIES = names(DECODER)
# a window of 3 tokens, shorter than the prompts: Mistral's layers and Qwen2's second layer
# attend only to the last 3 tokens (themselves included)
WINDOW = 3


def _causal_config(family: str):
    # 4 query heads; Llama, Qwen2 and Mistral share 2 key/value heads between them
    # (grouped-query attention, as their large checkpoints do)
    common = {"vocab_size": VOCAB, "num_hidden_layers": 2, "num_attention_heads": 4,
              "hidden_size": 32, "intermediate_size": 48, "max_position_embeddings": 64,
              "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
              "tie_word_embeddings": False}
    if family == "gpt2":
        return GPT2LMHeadModel, GPT2Config(n_embd=32, n_layer=2, n_head=4, n_inner=48,
                                           n_positions=64, vocab_size=VOCAB, pad_token_id=0,
                                           bos_token_id=1, eos_token_id=2)
    if family == "llama":  # attention and MLP biases on, so that every bias is exercised
        return LlamaForCausalLM, LlamaConfig(num_key_value_heads=2, attention_bias=True,
                                             mlp_bias=True, **common)
    if family == "qwen2":  # q, k, v biases are Qwen2's own; layer 0 full, layer 1 sliding
        return Qwen2ForCausalLM, Qwen2Config(num_key_value_heads=2, use_sliding_window=True,
                                             sliding_window=WINDOW, max_window_layers=1,
                                             **common)
    if family == "mistral":
        return MistralForCausalLM, MistralConfig(num_key_value_heads=2, sliding_window=WINDOW,
                                                 **common)
    if family == "gpt_neo":
        return GPTNeoForCausalLM, GPTNeoConfig(hidden_size=32, num_layers=2, num_heads=4,
                                               attention_types=[[["global"], 2]],
                                               vocab_size=VOCAB, max_position_embeddings=64)
    raise ValueError(family)


def tiny_causal_lm(family: str, seed: int = 0, dtype=torch.float64):
    """A random eval-mode decoder language model with eager attention, whose biases and norm
    weights are drawn too (initialisation sets them to 0 and 1, where a bug could hide)."""
    cls, config = _causal_config(family)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config).to(dtype).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0.0, 0.1)
            elif "norm" in name or ".ln_" in name:
                parameter.normal_(1.0, 0.2)
            else:  # larger than the usual 0.02, so that F(αA) varies measurably
                parameter.normal_(0.0, 0.15)
    return model


def tiny_prompts(lengths=(7, 4, 6), seed: int = 0, side: str = "right") -> dict[str, torch.Tensor]:
    """Random token ids (3..VOCAB-1) padded with id 0 on `side`, and `labels`: a next token
    to attribute for each prompt."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        real = slice(0, n) if side == "right" else slice(width - n, width)
        ids[row, real] = torch.randint(3, VOCAB, (n,), generator=g)
        mask[row, real] = 1
    labels = torch.randint(3, VOCAB, (len(lengths),), generator=g)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
