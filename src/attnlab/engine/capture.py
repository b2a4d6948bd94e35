"""One example as the token-interaction methods need it: its hidden states, attention
probabilities and value vectors from one forward pass, and F(A), the probability of the class
its attributions explain."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from attnlab.engine import models
from attnlab.engine.intervention import Intervention


@dataclass
class Captured:
    """One example without padding: n real tokens, L layers, H heads."""

    inputs: dict[str, torch.Tensor]  # model inputs, each (1, n)
    target: int  # F is the probability of this class
    states: list[torch.Tensor]  # [e^0, ..., e^L], each (1, n, d)
    probs: torch.Tensor  # (L, H, n, n)
    values: torch.Tensor  # (L, H, n, d_v)
    distribution: torch.Tensor  # (classes,) the unmodified model's class probabilities
    f_full: float  # F(A), the target's entry of `distribution`

    @property
    def n_tokens(self) -> int:
        return self.probs.shape[-1]


def target_probability(logits: torch.Tensor, target: int) -> torch.Tensor:
    """F: the softmax probability of class `target` for each row of (C, classes) logits."""
    return torch.softmax(logits.float(), dim=-1)[:, target]


def capture(model: PreTrainedModel, inputs: dict[str, torch.Tensor], target: int) -> Captured:
    """Everything the methods read of one example (a batch of one, without padding)."""
    inputs = {k: v for k, v in inputs.items() if k != "labels"}
    seen = Intervention(capture=True, capture_values=True)
    with torch.no_grad():
        if models.family_of(model).split:
            states = models.hidden_states(model, inputs, seen)
            logits = models.classify(model, states[-1], inputs["attention_mask"])
        else:  # BART: its classifier reads the decoder; the encoder states are for the norms
            logits = models.logits(model, inputs, seen)
            states = models.hidden_states(model, inputs)
    layers = sorted(seen.probs)
    distribution = torch.softmax(logits[0].float(), dim=-1)
    return Captured(
        inputs=inputs,
        target=target,
        states=states,
        probs=torch.stack([seen.probs[layer][0] for layer in layers]),
        values=torch.stack([seen.values[layer][0] for layer in layers]),
        distribution=distribution,
        f_full=float(distribution[target]),
    )
