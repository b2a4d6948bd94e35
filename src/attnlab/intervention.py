"""The one intervention point: an attention function registered with transformers.

Every analysis that needs to see or change attention (capture the probabilities, scale one
layer's probabilities by per-row factors for attribution, mask heads) passes an
`Intervention` to the model call as the keyword argument `attnlab=`. transformers hands
extra keyword arguments down to the attention function, so no module is patched and no
global state is kept: a call without `attnlab=` is the stock eager computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

ATTN_IMPLEMENTATION = "attnlab"
# Set on each analysed attention module by `models.prepare_model`: DistilBERT's modules have
# no `layer_idx`, and BART's decoder modules reuse encoder indices, so we number them ourselves.
LAYER_ATTRIBUTE = "attnlab_layer"


@dataclass
class Intervention:
    """What one forward pass should do to attention, and what it recorded.

    capture:     record the (post-mask, post-scale) probabilities of every analysed layer.
    scale_layer: the layer whose probabilities are multiplied by `scale` (one factor per
                 batch row); the scaled tensor becomes a leaf that requires grad, stored in
                 `scaled`, so ∂F/∂(αA) can be taken with `torch.autograd.grad`.
    head_mask:   (L, H) or (B, L, H) multipliers of each head's probabilities (0 = masked).
    """

    capture: bool = False
    scale_layer: int | None = None
    scale: torch.Tensor | None = None
    head_mask: torch.Tensor | None = None
    probs: dict[int, torch.Tensor] = field(default_factory=dict)
    scaled: torch.Tensor | None = None

    def apply(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        """Transform layer `layer`'s probabilities (B, H, Q, K) as asked; record what was asked."""
        if self.head_mask is not None:
            mask = self.head_mask[..., layer, :].to(probs)
            probs = probs * (mask[:, :, None, None] if mask.dim() == 2 else mask[:, None, None])
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
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.softmax(weights, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    layer = getattr(module, LAYER_ATTRIBUTE, None)
    if attnlab is not None and layer is not None:
        weights = attnlab.apply(layer, weights)
    output = torch.matmul(weights, value)
    return output.transpose(1, 2).contiguous(), weights


AttentionInterface.register(ATTN_IMPLEMENTATION, attention_forward)
# Without a mask function under the same name the attention function gets no padding mask.
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)
