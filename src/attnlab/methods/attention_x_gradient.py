"""Attention × gradient: the one-node shortcut of self-attention attribution
(attnlab.methods.attattr), its integral replaced by the gradient at α = 1.

F is the probability of the class the dump attributed (`target`). Head-summed, per layer l:

    g^l_ij = Σ_h A^l_h,ij ∂F(A^l)/∂A^l_h,ij
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.capture import Captured, target_probability
from attnlab.engine.intervention import Intervention
from attnlab.methods.method import GRADIENTS, Method, as_scores


def attention_x_gradient(model: PreTrainedModel, example: Captured) -> torch.Tensor:
    """g^l_ij of every layer, as (L, n, n): one forward and backward pass per layer."""
    out = []
    for layer in range(example.probs.shape[0]):
        intervention = Intervention(scale_layer=layer,
                                    scale=torch.ones(1, device=example.probs.device))
        with torch.enable_grad():
            f = target_probability(models.logits(model, example.inputs, intervention),
                                   example.target)
            (grad,) = torch.autograd.grad(f.sum(), intervention.scaled)
        out.append((intervention.scaled.detach() * grad)[0].sum(dim=0))
    return torch.stack(out)


def _score(model: PreTrainedModel, captured: Captured) -> np.ndarray:
    return as_scores(attention_x_gradient(model, captured))


METHOD = Method("attention_x_gradient", frozenset({"model", "captured", GRADIENTS}), _score,
                target=True)
