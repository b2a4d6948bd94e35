"""What every token-interaction method is: a name, what it reads, and a score function.

A method scores one example at a time: `score` returns its (L, n, n) scores [l, i, j] (layer
l, query position i, key position j, n real tokens) as float64. It takes, as keyword
arguments, exactly the sources its `needs` name, the same objects for every method of one
example (attnlab.analyses.interaction_methods.score_example builds them):

    attention   the head-mean attention (L, n, n), float64 (attention_graph.head_mean)
    captured    the example's forward pass (attnlab.engine.capture.Captured)
    model       the classifier it was captured from
    dump        its row of the attribution dumps (`DumpRow`)
    batch_size  how many edge-masked copies of the example one forward pass may run

and one that is no argument:

    gradients   it takes gradients through the model: it runs with autograd on, after the
                methods that do not (those run under torch.no_grad()).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

GRADIENTS = "gradients"


@dataclass(frozen=True)
class Method:
    name: str  # in the tables and figures
    needs: frozenset[str]  # the sources it reads (above)
    score: Callable[..., np.ndarray]  # one example's (L, n, n) scores, from its `needs`
    # False: the scores are read off what is there already (the captured forward pass, the
    # dumps), so the method has no time of its own here
    timed: bool = True


@dataclass(frozen=True)
class DumpRow:
    """One example's row of the attribution dumps, with the shape of its flat arrays."""

    row: pd.Series
    n_layers: int
    n_heads: int


def as_scores(scores: torch.Tensor) -> np.ndarray:
    """A method's scores computed by torch, as the float64 array every method returns."""
    return scores.double().cpu().numpy()
