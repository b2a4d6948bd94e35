"""What every token-interaction method is: a name, what it reads, and a score function.

A method scores one example at a time: `score` returns its (L, n, n) scores [l, i, j] (layer
l, query position i, key position j, n real tokens) as float64. It takes, as keyword
arguments, exactly the sources its `needs` name, the same objects for every method of one
example (attnlab.analyses.interaction_methods.score_example builds them):

    attention   the head-mean attention (L, n, n), float64 (attention_graph.head_mean)
    captured    the example's forward pass (attnlab.engine.capture.Captured)
    model       the classifier it was captured from
    engine      the attribution engine's keyword arguments (attribution.engine_options)
    batch_size  how many edge-masked copies of the example one forward pass may run
    variants    which of a method's named variants to compute (`Variants`)

and one that is no argument:

    gradients   it takes gradients through the model: it runs with autograd on, after the
                methods that do not (those run under torch.no_grad()).

A method whose scores explain F (the target's probability) says so (`target`): attnlab.explain
then sums its scores over the terms of a continuation or a contrast, and scores the others once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

GRADIENTS = "gradients"


@dataclass(frozen=True)
class Method:
    name: str  # in the tables and figures
    needs: frozenset[str]  # the sources it reads (above)
    score: Callable[..., np.ndarray]  # one example's (L, n, n) scores, from its `needs`
    # whether it applies to a decoder language model (causal, pre-LN): not the methods that
    # decompose an encoder's post-LN sublayer
    decoders: bool = True
    # whether its scores explain F, the target's probability (attattr's: the engine's score),
    # and so change with the target; the others read the input alone
    target: bool = False


@dataclass(frozen=True)
class Variants:
    """The variants attnlab keeps beside the authors' definitions (docs/methods.md); the
    defaults are the authors'."""

    # flow normalised so that each output node's flows sum to 1 (Abnar & Zuidema's code)
    flow_normalised: bool = True
    # ALTI measured against the layer norm's whole output, biases included (Ferrando et al.'s)
    alti_biases: bool = True


def as_scores(scores: torch.Tensor) -> np.ndarray:
    """A method's scores computed by torch, as the float64 array every method returns."""
    return scores.double().cpu().numpy()
