"""The one intervention point: an attention function registered with transformers.

Every analysis that needs to see or change attention (capture the probabilities or the value
vectors, scale one layer's probabilities by per-row factors for attribution, mask heads or
single edges, permute or replace a layer's probabilities, map the keys, hold the probabilities
out of a gradient) passes an
`Intervention` to the model call as the keyword argument `attnlab=`. transformers hands extra
keyword arguments down to the attention function, so no module is patched and no global state
is kept: a call without `attnlab=` is the stock eager computation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

ATTN_IMPLEMENTATION = "attnlab"
# Set on each analysed attention module by `models.prepare_model`: DistilBERT's modules have
# no `layer_idx`, and BART's decoder modules reuse encoder indices, so we number them ourselves.
LAYER_ATTRIBUTE = "attnlab_layer"


class Stopped(Exception):
    """What the attention function of `Intervention.stop_at`'s layer raises: the keys and
    values (B, H, K, d) its queries would attend to."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values = keys, values


@dataclass
class Intervention:
    """What one forward pass should do to attention, and what it recorded.

    Tensors of shape (B, H, Q, K) are per batch row, head, query and key position.

    detach:         cut the graph at every attention's probabilities, analysed layer or not
                    (BART's decoder and cross-attention too): a gradient of the output flows
                    through the values, with every attention distribution held at its value
                    (Jain & Wallace's gradient importance). The changes below apply after it.
    capture:        record the probabilities of every analysed layer as used (after every
                    change below), in `probs`.
    capture_values: record the value vectors (B, H, K, d_v) of every analysed layer in `values`.
    scale_layer:    the layer whose probabilities are multiplied by `scale` (one factor per
                    batch row); the scaled tensor becomes a leaf that requires grad, stored in
                    `scaled`, so ∂F/∂(αA) can be taken with `torch.autograd.grad`.
    head_mask:      (L, H) or (B, L, H) multipliers of each head's probabilities (0 = masked).
    head_fill:      {layer: (H, d_v)} what a head outputs where head_mask takes its output away:
                    the output becomes m·(A V) + (1 − m)·fill for a head's multiplier m, so a
                    mask of 0 with the heads' mean outputs mean-ablates them (absent: zero).
    edge_mask:      {layer: multipliers broadcastable to (B, H, Q, K)} of single entries of the
                    layer's probabilities (0 = edge removed; (B, 1, Q, K) for every head alike);
                    like head_mask, rows are not renormalised.
    replace:        {layer: (B, H, Q, K) probabilities} used instead of the layer's own.
    permute:        {layer: (B, H, Q, K) key indices}: row q of head h takes its weight for key k
                    from key permute[..., q, k] (a permutation of the keys of every row).
    key_map:        f(layer, keys) -> keys, applied to every analysed layer's keys (B, H, K, d)
                    before the scores are computed; each (original, mapped) pair is recorded in
                    `keys` (with their graph, for a loss on the distance).
    attended:       {layer: (keys, values)}, each broadcastable to (B, H, K, d), used instead of
                    the layer's own (after the grouped-query repeat): the queries of a few
                    positions attend to the keys of a whole sequence (`models.attended`).
    stop_at:        the layer whose attention function stops the pass, raising `Stopped` with
                    the keys and values it would attend to: a pass run only for them.
    """

    detach: bool = False
    capture: bool = False
    capture_values: bool = False
    scale_layer: int | None = None
    scale: torch.Tensor | None = None
    head_mask: torch.Tensor | None = None
    head_fill: dict[int, torch.Tensor] = field(default_factory=dict)
    edge_mask: dict[int, torch.Tensor] = field(default_factory=dict)
    replace: dict[int, torch.Tensor] = field(default_factory=dict)
    permute: dict[int, torch.Tensor] = field(default_factory=dict)
    key_map: Callable[[int, torch.Tensor], torch.Tensor] | None = None
    attended: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    stop_at: int | None = None
    probs: dict[int, torch.Tensor] = field(default_factory=dict)
    values: dict[int, torch.Tensor] = field(default_factory=dict)
    keys: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    scaled: torch.Tensor | None = None

    def map_keys(self, layer: int, key: torch.Tensor) -> torch.Tensor:
        """The keys layer `layer` computes its scores with."""
        if self.key_map is None:
            return key
        mapped = self.key_map(layer, key)
        self.keys[layer] = (key, mapped)
        return mapped

    def see_values(self, layer: int, value: torch.Tensor) -> None:
        if self.capture_values:
            self.values[layer] = value.detach()

    def _head_multipliers(self, layer: int, like: torch.Tensor) -> torch.Tensor:
        """head_mask's multipliers of layer `layer`, broadcastable to (B, H, Q, ·)."""
        mask = self.head_mask[..., layer, :].to(like)
        return mask[:, :, None, None] if mask.dim() == 2 else mask[:, None, None]

    def fill(self, layer: int, output: torch.Tensor) -> torch.Tensor:
        """Layer `layer`'s head outputs (B, H, Q, d_v), with head_fill's share added."""
        if self.head_mask is None or layer not in self.head_fill:
            return output
        fill = self.head_fill[layer].to(output)[:, None, :]
        return output + (1 - self._head_multipliers(layer, output)) * fill

    def apply(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        """Transform layer `layer`'s probabilities (B, H, Q, K) as asked; record what was asked."""
        if layer in self.replace:
            probs = self.replace[layer].to(probs)
        if layer in self.permute:
            probs = probs.gather(-1, self.permute[layer].to(probs.device))
        if self.head_mask is not None:
            probs = probs * self._head_multipliers(layer, probs)
        if layer in self.edge_mask:
            probs = probs * self.edge_mask[layer].to(probs)
        if self.scale_layer == layer:
            factors = self.scale.to(probs).view(-1, 1, 1, 1)
            probs = (probs.detach() * factors).requires_grad_(True)
            self.scaled = probs
        if self.capture:
            self.probs[layer] = probs.detach()
        return probs


def attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    attnlab: Intervention | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention, op for op as transformers' own, with the intervention applied."""
    layer = getattr(module, LAYER_ATTRIBUTE, None)
    # grouped-query attention (Llama, Qwen2, Mistral): a key/value head serves several queries
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:  # (a copy otherwise would change the bits of the stock computation)
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    active = attnlab is not None and layer is not None
    if active:
        key, value = attnlab.attended.get(layer, (key, value))
        key = attnlab.map_keys(layer, key)
        attnlab.see_values(layer, value)
        if attnlab.stop_at == layer:
            raise Stopped(key, value)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.softmax(weights, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    if attnlab is not None and attnlab.detach:
        weights = weights.detach()
    if active:
        weights = attnlab.apply(layer, weights)
    output = torch.matmul(weights, value)
    if active:
        output = attnlab.fill(layer, output)
    return output.transpose(1, 2).contiguous(), weights


AttentionInterface.register(ATTN_IMPLEMENTATION, attention_forward)
# Without a mask function under the same name the attention function gets no padding mask.
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)
