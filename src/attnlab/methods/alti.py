"""ALTI (Ferrando, Gállego & Costa-jussà 2022, "Measuring the Mixing of Contextual Information
in the Transformer", EMNLP).

In the notation of attnlab.methods.sublayer_parts (T_ij: token j's part of the attention
sublayer's layer-norm output at i, σ_i: the norm's scale), the output is

    LN(z_i) = y_i = Σ_j T_ij + L(b_O)/σ_i + β,

where b_O is the output projection's bias and β the norm's: the bias terms belong to no token.
The layer-wise contribution of token j to position i is

    c^l_ij = max(0, ‖y_i‖₁ − ‖y_i − T_ij‖₁), normalised so Σ_j C^l_ij = 1,

measured against the whole output y_i, biases included, as the authors' code does
(`get_contributions` of mt-upc/transformer-contributions). `biases=False` leaves the bias
terms out of y_i (attnlab's first version; docs/methods.md). ALTI aggregates the layers as
rollout does (the residual is already inside): ALTI^0 = C^0, ALTI^l = C^l ALTI^{l−1}. The
feed-forward sublayer is not decomposed (as in the paper).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from attnlab.engine.capture import Captured
from attnlab.methods.attention_graph import roll_out
from attnlab.methods.method import Variants, as_scores
from attnlab.methods.sublayer_parts import Sublayer, normalised_parts, sublayers


def alti_layer(sublayer: Sublayer, *, biases: bool = True) -> torch.Tensor:
    """ALTI's layer-wise contributions C_ij (rows sum to 1) of one layer, as (n, n);
    `biases`: y_i with its bias terms (the authors')."""
    pieces, sigma = normalised_parts(sublayer)
    y = pieces.sum(dim=1)
    if biases:
        norm, bias = sublayer.layer_norm, sublayer.out_proj.bias
        y = y + norm.weight * (bias - bias.mean()) / sigma[:, None] + norm.bias
    c = (y.abs().sum(dim=-1)[:, None] - (y[:, None] - pieces).abs().sum(dim=-1)).clamp_min(0)
    return c / c.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(c.dtype).tiny)


def score(model: PreTrainedModel, captured: Captured, variants: Variants) -> np.ndarray:
    contributions = [alti_layer(sublayer, biases=variants.alti_biases)
                     for sublayer in sublayers(model, captured)]
    return roll_out(as_scores(torch.stack(contributions)))
