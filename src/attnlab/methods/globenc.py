"""GlobEnc (Modarressi, Fayyaz, Yaghoobzadeh & Pilehvar 2022, "GlobEnc: Quantifying Global
Token Attribution by Incorporating the Whole Encoder Layer in Transformers", NAACL).

The norm family's last step: where attention-norm stops at the attention sublayer and ALTI at
its layer norm, GlobEnc carries token j's part T_ij of the first layer norm's output
(attnlab.methods.sublayer_parts) through the second one, the norm closing the layer after the
feed-forward sublayer, along its residual path (the feed-forward sublayer itself is not
decomposed). With that norm's weight γ₂ and scale σ₂_i = sqrt(Var(u_i) + ε), u_i what it
normalises,

    N^l_ij = ‖γ₂ ⊙ (T_ij − mean(T_ij)) / σ₂_i‖₂                    (N-Enc, one layer)
    G^0 = N^0,  G^l = N^l G^{l−1}                                 (GlobEnc, rolled out)

as the authors' code computes it (mohsenfayyaz/GlobEnc: `post_ln2_norm` and
`AttentionRollout` with neither a residual added nor a normalisation).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured
from attnlab.methods.attention_graph import roll_out
from attnlab.methods.method import as_scores
from attnlab.methods.sublayer_parts import (
    Sublayer,
    normalised_parts,
    output_norm_inputs,
    sublayers,
)


def encoder_norm(sublayer: Sublayer, normalised: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """N-Enc N_ij of one layer, as (n, n); `normalised` is what its closing layer norm `norm`
    normalises, (n, d)."""
    pieces, _ = normalised_parts(sublayer)
    sigma = (normalised.var(dim=-1, unbiased=False) + norm.eps).sqrt()
    closing = norm.weight * (pieces - pieces.mean(dim=-1, keepdim=True)) / sigma[:, None, None]
    return closing.norm(dim=-1)


def score(model: PreTrainedModel, captured: Captured) -> np.ndarray:
    inputs = output_norm_inputs(model, captured)
    norms = [encoder_norm(sublayer, inputs[layer], models.output_norm(model, layer))
             for layer, sublayer in enumerate(sublayers(model, captured))]
    return roll_out(as_scores(torch.stack(norms)))
