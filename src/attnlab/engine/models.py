"""Model families the intervention point supports, and the pieces the engines need of them.

A family (its row in attnlab.plumbing.families) says where its analysed attention modules
are, how to compute the hidden states entering the first of them (the input embeddings
x = e^0; this module's EMBEDDINGS), and how to run the model in three parts (embeddings, the
layer stack, the head: HEADS) so that the attribution engine can start from a
cached hidden state at layer l instead of recomputing every layer below it. BART's encoder
runs from its embeddings like the others (for analyses of hidden states), but its classifier
reads the decoder: as a classifier it is always run whole.

Two kinds of model: encoder classifiers (the head reads the first token, <s> or [CLS]) and
decoder language models (GPT-2, Llama, Qwen2, Mistral: causal attention, pre-LN). A decoder's
"class" is the next token: its logits are the next-token logits at the example's last real
token (`read_positions`), whichever side the batch is padded on, and its position ids count
real tokens only, so that an example gives the same numbers alone and in a padded batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    GgufConfig,
    PreTrainedModel,
)
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    create_sliding_window_causal_mask,
)

from attnlab.engine.intervention import (
    ATTN_IMPLEMENTATION,
    LAYER_ATTRIBUTE,
    Intervention,
    Stopped,
)
from attnlab.plumbing.errors import AttnlabError, ConfigError
from attnlab.plumbing.families import FAMILIES, Family
from attnlab.plumbing.preflight import checkpoint_shape

log = logging.getLogger(__name__)


class UnsupportedModelError(AttnlabError, ValueError):
    """The model's family does not route attention through transformers' AttentionInterface."""


def _embeddings(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], token_types: bool = True
) -> torch.Tensor:
    base = _base(model)
    kwargs = {"input_ids": inputs["input_ids"]}
    if "token_type_ids" in inputs and token_types:
        kwargs["token_type_ids"] = inputs["token_type_ids"]
    hidden = base.embeddings(**kwargs)
    if hasattr(base, "embeddings_project"):  # ELECTRA with embedding_size != hidden_size
        hidden = base.embeddings_project(hidden)
    return hidden


def _bart_embeddings(model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    # as BartEncoder.forward computes them (its dropout is off in eval mode)
    encoder = _base(model).encoder
    tokens = encoder.embed_tokens(inputs["input_ids"])
    return encoder.layernorm_embedding(tokens + encoder.embed_positions(tokens[:, :, -1]))


def _pooler_head(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    return model.classifier(model.dropout(_base(model).pooler(hidden)))


def _sequence_head(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    # RoBERTa and ELECTRA heads take the whole sequence and read position 0 themselves.
    return model.classifier(hidden)


def _pre_classifier_head(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    pooled = nn.functional.relu(model.pre_classifier(hidden[:, 0]))
    return model.classifier(model.dropout(pooled))


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids (B, S) that count real tokens only: a left-padded example's first real
    token is at position 0, as when it is alone (padding gets 0 or its last token's id)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def read_positions(model: PreTrainedModel, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) the position each example's output is read from, by `classify` and `logits`: a
    decoder's last real token (left or right padding alike), an encoder classifier's first."""
    if not family_of(model).causal:
        return torch.zeros(len(attention_mask), dtype=torch.long, device=attention_mask.device)
    index = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (index * attention_mask.bool()).amax(dim=1)


def _gpt2_embeddings(model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    # as GPT2Model.forward computes them (its dropout is off in eval mode)
    base = _base(model)
    return base.wte(inputs["input_ids"]) + base.wpe(positions(inputs["attention_mask"]))


def _token_embeddings(model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    # Llama, Qwen2, Mistral: positions enter each layer as rotary embeddings (`layer_inputs`)
    return _base(model).embed_tokens(inputs["input_ids"])


def _gpt2_head(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    return model.lm_head(_base(model).ln_f(hidden))


def _norm_head(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    return model.lm_head(_base(model).norm(hidden))


# The functions the rows of FAMILIES name (attnlab.plumbing.families): inputs -> e^0, and
# hidden -> logits.
EMBEDDINGS: dict[str, Callable[[PreTrainedModel, dict[str, torch.Tensor]], torch.Tensor]] = {
    "embeddings": _embeddings,
    "embeddings_without_types": partial(_embeddings, token_types=False),  # DistilBERT's
    "bart": _bart_embeddings,
    "learned_positions": _gpt2_embeddings,
    "tokens": _token_embeddings,
}
HEADS: dict[str, Callable[[PreTrainedModel, torch.Tensor], torch.Tensor]] = {
    "pooler": _pooler_head,
    "sequence": _sequence_head,
    "pre_classifier": _pre_classifier_head,
    "ln_f": _gpt2_head,
    "norm": _norm_head,
}


def family_of(model: PreTrainedModel) -> Family:
    """The model's family, or a one-line error naming the supported ones."""
    model_type = model.config.model_type
    if model_type not in FAMILIES:
        raise UnsupportedModelError(
            f"model family {model_type!r} is not supported (its attention cannot be intervened "
            f"on); supported families: {', '.join(FAMILIES)}"
        )
    return FAMILIES[model_type]


def _get(obj: nn.Module, dotted: str) -> nn.Module:
    for name in dotted.split("."):
        obj = getattr(obj, name)
    return obj


def attention_sublayer(model: PreTrainedModel, layer: int) -> tuple[nn.Linear, nn.LayerNorm]:
    """The output projection W_O of layer `layer`'s attention and the layer norm after it."""
    family = _post_ln(model)
    block = layer_stack(model)[layer]
    return _get(block, family.layout.out_proj), _get(block, family.layout.attention_norm)


def output_projection(
    model: PreTrainedModel, layer: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """W_O of layer `layer`'s attention as nn.Linear stores it, (d, H·d_v), and its bias (None
    without one), every family: GPT-2's Conv1D stores the transpose."""
    module = _get(layer_stack(model)[layer], family_of(model).layout.out_proj)
    weight = module.weight if isinstance(module, nn.Linear) else module.weight.T
    return weight, module.bias


def output_norm(model: PreTrainedModel, layer: int) -> nn.LayerNorm:
    """The layer norm that closes layer `layer` (after the feed-forward sublayer)."""
    return _get(layer_stack(model)[layer], _post_ln(model).layout.output_norm)


def _post_ln(model: PreTrainedModel) -> Family:
    family = family_of(model)
    if family.layout.attention_norm is None:
        raise UnsupportedModelError(
            f"model family {model.config.model_type!r} is pre-LN; ALTI and GlobEnc "
            f"decompose post-LN encoders only")
    return family


def layer_stack(model: PreTrainedModel) -> nn.ModuleList:
    return _get(_base(model), family_of(model).layout.layers)


def _base(model: PreTrainedModel) -> nn.Module:
    return getattr(model, family_of(model).layout.base)


def prepare_model(model: PreTrainedModel) -> PreTrainedModel:
    """Route the model's attention through the intervention point; put it in eval mode."""
    family = family_of(model)
    for index, layer in enumerate(layer_stack(model)):
        setattr(_get(layer, family.layout.attention), LAYER_ATTRIBUTE, index)
    model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return model.eval()


def from_pretrained(auto_class: type, name_or_path: str | Path, gguf_file: str | None = None,
                    **kwargs) -> PreTrainedModel:
    """A model from a hub id or local directory, or from its GGUF file `gguf_file` there
    (model.gguf_file: every tensor dequantized to float32), or one line saying why it cannot be
    loaded; `kwargs` go to from_pretrained."""
    local = Path(name_or_path).is_dir()
    if gguf_file is not None:
        if local:  # refused in one line before anything is dequantized
            checkpoint_shape(name_or_path, gguf_file)
        # dequantize: plain float32 weights, never kept in GGUF blocks (as transformers does
        # by default, where a GGUF matmul kernel is installed); and a model without GGUF
        # settings, which saves (rule finetune) as an ordinary checkpoint folder
        kwargs.update(gguf_file=gguf_file, dtype=torch.float32,
                      quantization_config=GgufConfig(dequantize=True))
    try:
        return auto_class.from_pretrained(str(name_or_path), local_files_only=local, **kwargs)
    except (OSError, SafetensorError) as err:  # missing, unreadable or cut-short files
        reason = " ".join(str(err).split())  # one line: the hub's messages span several
        raise AttnlabError(f"{name_or_path}: the model cannot be loaded ({reason})") from err


def _tokenizer(name_or_path: str | Path, gguf_file: str | None = None):
    return AutoTokenizer.from_pretrained(
        str(name_or_path), local_files_only=Path(name_or_path).is_dir(), gguf_file=gguf_file)


def load_classifier(
    name_or_path: str | Path, device: torch.device | str = "cpu"
) -> tuple[PreTrainedModel, object]:
    """A classifier and its tokenizer from a hub id or local directory, ready to analyse."""
    model = from_pretrained(AutoModelForSequenceClassification, name_or_path)
    if family_of(model).causal:  # refuse before any other work
        raise UnsupportedModelError(
            f"{name_or_path}: {model.config.model_type!r} is a decoder language model family; "
            f"its classifier is not supported (load the language model with load_causal_lm)")
    return prepare_model(model).to(device), _tokenizer(name_or_path)


def load_causal_lm(
    name_or_path: str | Path, device: torch.device | str = "cpu", *,
    gguf_file: str | None = None,
) -> tuple[PreTrainedModel, object]:
    """A decoder language model (GPT-2, Llama, Qwen2, Mistral) and its tokenizer from a hub id
    or local directory, or from its GGUF file `gguf_file` there (dequantized to float32), ready
    to analyse. A tokenizer without a padding token (GPT-2's) pads with its end-of-text token:
    padding is masked, and either side gives the same numbers."""
    model = from_pretrained(AutoModelForCausalLM, name_or_path, gguf_file)
    if not family_of(model).causal:  # refuse before any other work
        raise UnsupportedModelError(f"{name_or_path}: {model.config.model_type!r} is not a "
                                    f"decoder language model family")
    tokenizer = _tokenizer(name_or_path, gguf_file)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return prepare_model(model).to(device), tokenizer


def untrained_copy(model: PreTrainedModel, seed: int) -> PreTrainedModel:
    """A model of the same family and shape with fresh weights, drawn by the family's own
    initialisation with `seed`, ready to analyse: what a method gives with nothing learned."""
    torch.manual_seed(seed)
    parameter = next(model.parameters())
    fresh = type(model)(model.config).to(device=parameter.device, dtype=parameter.dtype)
    return prepare_model(fresh)


def classified_position(model: PreTrainedModel, n_tokens: int) -> int:
    """The position whose last hidden state the head reads, in an example of n_tokens without
    padding: the first ([CLS], <s>); BART's classifier reads its last </s>, a decoder its last
    token (whose next token it predicts)."""
    family = family_of(model)
    return 0 if family.split and not family.causal else n_tokens - 1


def align_labels(model: PreTrainedModel, label_names: Sequence[str]) -> PreTrainedModel:
    """Reorder a fine-tuned classifier's classes to `label_names`, matched by name (any case).

    A published checkpoint may order its classes unlike the dataset (facebook/bart-large-mnli:
    contradiction, neutral, entailment; GLUE MNLI: entailment, neutral, contradiction). The rows
    of the output layer are permuted, so that class i of the model is label_names[i].
    """
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    lower = [name.lower() for name in names]
    if sorted(lower) != sorted(name.lower() for name in label_names):
        raise ConfigError(f"the model's classes {names} are not the task's label_names "
                         f"{list(label_names)} (matched by name, ignoring case)")
    order = [lower.index(name.lower()) for name in label_names]
    layer = _get(model, family_of(model).output)
    with torch.no_grad():
        layer.weight.copy_(layer.weight[order])
        layer.bias.copy_(layer.bias[order])
    model.config.id2label = dict(enumerate(label_names))
    model.config.label2id = {name: i for i, name in enumerate(label_names)}
    return model


def num_layers(model: PreTrainedModel) -> int:
    return len(layer_stack(model))


def head_shape(model: PreTrainedModel) -> tuple[int, int]:
    """(L, H): analysed layers and heads per layer."""
    return num_layers(model), model.config.num_attention_heads


def embed(model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Hidden states entering layer 0, the input embeddings x = e^0 (every family)."""
    return EMBEDDINGS[family_of(model).embeddings](model, inputs)


@dataclass(frozen=True)
class LayerInputs:
    """What the layers take besides the hidden states, for one batch (`layer_inputs`)."""

    masks: dict[str, torch.Tensor | None]  # 4-D additive mask per attention type
    types: tuple[str, ...]  # each layer's attention type (a key of masks)
    rotary: tuple[torch.Tensor, torch.Tensor] | None = None  # (cos, sin), rotary families

    def select(self, rows: torch.Tensor, width: int) -> LayerInputs:
        """The inputs of batch rows `rows`, cut to their first `width` positions."""
        masks = {kind: None if mask is None else mask[rows][..., :width, :width]
                 for kind, mask in self.masks.items()}
        rotary = None if self.rotary is None else tuple(t[rows, :width] for t in self.rotary)
        return LayerInputs(masks, self.types, rotary)

    def at(self, queries: torch.Tensor) -> LayerInputs:
        """The inputs of query positions `queries` (B, Q) of each batch row, every key kept:
        for Q rows run through a layer whose keys and values are given (`attended`)."""
        batch, count = queries.shape

        def rows(tensor: torch.Tensor, dim: int) -> torch.Tensor:
            tensor = tensor.expand(batch, *tensor.shape[1:])
            shape = [batch] + [1] * (tensor.dim() - 1)
            shape[dim] = count
            index = queries.view(shape).expand(*tensor.shape[:dim], count, *tensor.shape[dim + 1:])
            return tensor.gather(dim, index)

        masks = {kind: None if mask is None else rows(mask, 2) for kind, mask in self.masks.items()}
        rotary = None if self.rotary is None else tuple(rows(t, 1) for t in self.rotary)
        return LayerInputs(masks, self.types, rotary)


def layer_inputs(
    model: PreTrainedModel, hidden: torch.Tensor, attention_mask: torch.Tensor
) -> LayerInputs:
    """The masks (built by the registered mask function) and, for rotary families, the
    position embeddings that the layers take, for hidden states (B, S, d) entering them."""
    config, n_layers = model.config, num_layers(model)
    if not family_of(model).causal:
        mask = create_bidirectional_mask(
            config=config, inputs_embeds=hidden, attention_mask=attention_mask)
        return LayerInputs({"full_attention": mask}, ("full_attention",) * n_layers)
    position_ids = positions(attention_mask)
    # Qwen2 names each layer's type (some may attend within a sliding window); Mistral's
    # layers all slide when its config sets a window. Causality comes from the mask alone (the
    # attention function applies no is_causal), so every layer gets one.
    every = "sliding_attention" if getattr(config, "sliding_window", None) else "full_attention"
    types = tuple(getattr(config, "layer_types", None) or (every,) * n_layers)
    build = {"full_attention": create_causal_mask,
             "sliding_attention": create_sliding_window_causal_mask}
    masks = {kind: build[kind](config=config, inputs_embeds=hidden,
                               attention_mask=attention_mask, past_key_values=None,
                               position_ids=position_ids, allow_is_causal_skip=False)
             for kind in set(types)}
    base = _base(model)
    rotary = base.rotary_emb(hidden, position_ids) if hasattr(base, "rotary_emb") else None
    return LayerInputs(masks, types, rotary)


def run_layers(
    model: PreTrainedModel,
    hidden: torch.Tensor,
    inputs: LayerInputs,
    start: int,
    stop: int | None = None,
    intervention: Intervention | None = None,
) -> torch.Tensor:
    """Apply layers start..stop-1 to `hidden` (every family; BART: its encoder layers)."""
    extra = {} if inputs.rotary is None else {"position_embeddings": inputs.rotary}
    stack = layer_stack(model)
    for index in range(len(stack))[start:stop]:
        hidden = stack[index](hidden, attention_mask=inputs.masks[inputs.types[index]],
                              attnlab=intervention, **extra)
    return hidden


def attended(
    model: PreTrainedModel, hidden: torch.Tensor, inputs: LayerInputs, layer: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values (B, H, n, d) that layer `layer`'s queries attend to, for hidden
    states (B, n, d) entering it, as its attention function receives them (grouped-query
    heads repeated): the pass stops there, before the layer's scores and feed-forward."""
    try:
        run_layers(model, hidden, inputs, layer, layer + 1, Intervention(stop_at=layer))
    except Stopped as stopped:
        return stopped.keys, stopped.values
    raise AssertionError(f"layer {layer}'s attention did not reach the attention function")


def hidden_states(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    intervention: Intervention | None = None,
) -> list[torch.Tensor]:
    """[e^0, e^1, ..., e^L]: the input embeddings and the output of every analysed layer."""
    states = [embed(model, inputs)]
    context = layer_inputs(model, states[0], inputs["attention_mask"])
    for layer in range(num_layers(model)):
        states.append(run_layers(model, states[-1], context, layer, layer + 1, intervention))
    return states


def check_layer(model: PreTrainedModel, layer: int, key: str) -> None:
    """Fail in one line, naming the config key, when `layer` is not a layer of the model."""
    n_layers = num_layers(model)
    if not 0 <= layer < n_layers:
        raise ConfigError(f"{key}: layer {layer} is out of range; the model has {n_layers} "
                         f"layers (0..{n_layers - 1})")


def classify(
    model: PreTrainedModel, hidden: torch.Tensor, attention_mask: torch.Tensor, *,
    at: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits (B, C) from the last layer's hidden states (B, S, d) (every family but BART's
    classifier); a decoder's are the next-token logits at each example's last real token, or
    with `at` (B, P) after each of its P positions, (B, P, C)."""
    family = family_of(model)
    if not family.causal:
        return HEADS[family.head](model, hidden)
    read = read_positions(model, attention_mask)[:, None] if at is None else at
    rows = torch.arange(len(hidden), device=hidden.device)[:, None]
    logits = HEADS[family.head](model, hidden[rows, read])
    return logits[:, 0] if at is None else logits


def logits(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    intervention: Intervention | None = None,
) -> torch.Tensor:
    """A whole forward pass with an optional intervention: (B, C) logits (a decoder's for the
    token after each example's last real token)."""
    model_inputs = {k: v for k, v in inputs.items() if k != "labels"}
    if not family_of(model).causal:
        return model(**model_inputs, attnlab=intervention).logits
    mask = model_inputs["attention_mask"]
    # the vocabulary projection only at the positions read (not B x S x vocabulary)
    keep, column = read_positions(model, mask).unique(return_inverse=True)
    out = model(**model_inputs, position_ids=positions(mask), logits_to_keep=keep,
                attnlab=intervention).logits
    return out[torch.arange(len(out), device=out.device), column]
