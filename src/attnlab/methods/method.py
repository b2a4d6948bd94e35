"""What every token-interaction method is: a name, what it computes and after whom, what it
reads, and a score function.

A method is its entry in attnlab.methods.registry (a `Method`) and its module,
attnlab.methods.<name>, whose function `score` scores one example at a time: it returns its
(L, n, n) scores [l, i, j] (layer l, query position i, key position j, n real tokens) as
float64. It takes, as keyword arguments, exactly the sources its `needs` name, the same
objects for every method of one example (attnlab.analyses.interaction_methods.score_example
builds them):

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

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

GRADIENTS = "gradients"


@dataclass(frozen=True)
class Method:
    name: str  # in the tables and figures, and the name of its module
    # what it computes, in the notation of docs/interaction_methods.md (its table's row)
    definition: str
    # the paper that defines it and the authors' code it equals ("baseline": no paper's)
    source: str
    needs: frozenset[str]  # the sources it reads (above)
    # whether it applies to a decoder language model (causal, pre-LN): not the methods that
    # decompose an encoder's post-LN sublayer
    decoders: bool = True
    # whether its scores explain F, the target's probability (attattr's: the engine's score),
    # and so change with the target; the others read the input alone
    target: bool = False

    @property
    def score(self) -> Callable[..., np.ndarray]:
        """One example's (L, n, n) scores from its `needs`: the function `score` of its module,
        imported when first asked for, so that reading the registry (the config's schema, when
        the workflow plans its jobs) imports no torch."""
        return importlib.import_module(f"attnlab.methods.{self.name}").score


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
