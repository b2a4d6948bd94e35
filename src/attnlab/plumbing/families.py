"""The model families attnlab supports, one row each in `FAMILIES`: what the dry run, the memory
estimate, the scratch builder and the engine read of a family.

A family is named by its config.json `model_type`. This module imports neither torch nor
transformers (Snakemake imports the dry run's checks, which read it, whenever it builds the
DAG); the engine adds the functions a row names by key (`embeddings`, `head`: the dictionaries
EMBEDDINGS and HEADS of attnlab.engine.models), so a family of an existing kind whose parts sit
where another's do is one row here.
"""

from __future__ import annotations

from dataclasses import dataclass

CLASSIFIER = "classifier"  # an encoder classifier (reads its first token): classification tasks
DECODER = "decoder"  # a decoder language model (causal attention, pre-LN): next_token tasks
# model.scratch.family when absent (no default is filled in, so that existing configurations'
# models keep their settings)
SCRATCH_DEFAULT = "bert"


@dataclass(frozen=True)
class Sizes:
    """The config.json keys of a family's sizes."""

    layers: str  # the analysed layers
    heads: str  # attention heads per layer
    hidden: str
    intermediate: str  # feed-forward width (null in config.json: 4 × hidden, as GPT-2's n_inner)
    positions: str  # the longest input it can take
    # For the memory estimate: the key of layers a pass runs besides the analysed ones (BART's
    # classifier runs its decoder, each layer about an encoder layer's size again), and whether
    # the feed-forward is gated (gate, up, their activation and product kept: twice a GELU
    # feed-forward's two tensors).
    extra_layers: str | None = None
    gated: bool = False


@dataclass(frozen=True)
class Layout:
    """Where a family's parts are, as dotted attribute paths."""

    base: str  # inside the model: the base model
    layers: str  # inside the base model: the layer list
    attention: str  # inside one layer: its self-attention module
    out_proj: str  # inside one layer: the attention's output projection W_O
    # inside one layer: the layer norms after the attention's and after the feed-forward's
    # residual connections, which the norm-based interaction methods decompose (post-LN
    # encoders; None for pre-LN decoders)
    attention_norm: str | None
    output_norm: str | None


@dataclass(frozen=True)
class Family:
    name: str  # config.json model_type
    kind: str  # CLASSIFIER or DECODER
    sizes: Sizes
    layout: Layout
    embeddings: str  # how the hidden states entering layer 0 are computed (a key of EMBEDDINGS)
    # hidden -> logits (a key of HEADS): for a classifier from the last layer's (B, S, d), for a
    # decoder from the (B, d) at the read position; None for a classifier that reads more than
    # its encoder's last layer (BART's runs its decoder) and so is always run whole
    head: str | None
    output: str  # inside the model: its last layer (one row per class or token)
    # config.json keys of its dropout rates: model.scratch.family may name a family with them
    scratch_dropout: tuple[str, ...] = ()

    @property
    def causal(self) -> bool:
        return self.kind == DECODER

    @property
    def split(self) -> bool:
        """Can the model be run from a cached hidden state at layer l (embeddings, layers and
        head apart)?"""
        return self.head is not None

    @property
    def scratch(self) -> bool:
        return bool(self.scratch_dropout)


BERT_SIZES = Sizes("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size",
                   "max_position_embeddings")
GATED_SIZES = Sizes("num_hidden_layers", "num_attention_heads", "hidden_size",
                    "intermediate_size", "max_position_embeddings", gated=True)
BERT_LAYOUT = ("encoder.layer", "attention.self", "attention.output.dense",
               "attention.output.LayerNorm", "output.LayerNorm")
ROTARY_LAYOUT = Layout("model", "layers", "self_attn", "self_attn.o_proj", None, None)

FAMILIES: dict[str, Family] = {family.name: family for family in (
    Family("bert", CLASSIFIER, BERT_SIZES, Layout("bert", *BERT_LAYOUT), "embeddings", "pooler",
           "classifier", scratch_dropout=("hidden_dropout_prob", "attention_probs_dropout_prob")),
    Family("roberta", CLASSIFIER, BERT_SIZES, Layout("roberta", *BERT_LAYOUT), "embeddings",
           "sequence", "classifier.out_proj"),
    Family("electra", CLASSIFIER, BERT_SIZES, Layout("electra", *BERT_LAYOUT), "embeddings",
           "sequence", "classifier.out_proj"),
    Family("distilbert", CLASSIFIER,
           Sizes("n_layers", "n_heads", "dim", "hidden_dim", "max_position_embeddings"),
           Layout("distilbert", "transformer.layer", "attention", "attention.out_lin",
                  "sa_layer_norm", "output_layer_norm"),
           "embeddings_without_types", "pre_classifier", "classifier"),
    Family("bart", CLASSIFIER,
           Sizes("encoder_layers", "encoder_attention_heads", "d_model", "encoder_ffn_dim",
                 "max_position_embeddings", extra_layers="decoder_layers"),
           Layout("model", "encoder.layers", "self_attn", "self_attn.out_proj",
                  "self_attn_layer_norm", "final_layer_norm"),
           "bart", None, "classification_head.out_proj"),
    Family("gpt2", DECODER, Sizes("n_layer", "n_head", "n_embd", "n_inner", "n_positions"),
           Layout("transformer", "h", "attn", "attn.c_proj", None, None), "learned_positions",
           "ln_f", "lm_head", scratch_dropout=("resid_pdrop", "embd_pdrop", "attn_pdrop")),
    Family("llama", DECODER, GATED_SIZES, ROTARY_LAYOUT, "tokens", "norm", "lm_head",
           scratch_dropout=("attention_dropout",)),
    Family("qwen2", DECODER, GATED_SIZES, ROTARY_LAYOUT, "tokens", "norm", "lm_head"),
    Family("mistral", DECODER, GATED_SIZES, ROTARY_LAYOUT, "tokens", "norm", "lm_head"),
)}


def names(kind: str | None = None, *, scratch: bool = False) -> tuple[str, ...]:
    """The families (of `kind`; that model.scratch.family may name) as messages list them."""
    return tuple(name for name, family in FAMILIES.items()
                 if kind in (None, family.kind) and (family.scratch or not scratch))
