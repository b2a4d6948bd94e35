"""Self-attention attribution (Hao, Dong, Wei & Xu 2021, "Self-Attention Attribution:
Interpreting Information Interactions Inside Transformer", AAAI), head-summed per layer l:

    a^l_ij = Σ_h A^l_h,ij ∫_0^1 ∂F(α A^l)/∂A^l_h,ij dα      (attnlab.engine.attribution)

F is the probability of the class the dumps attributed (the example's `target`). It is computed
here again, by the engine with the run's `attribution` settings, rather than read from the
dumps: the dumps may keep only the strongest edges, and so its time is measured as every other
method's is (the same numbers as the dumps', up to the rounding of a batch of one).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel

from attnlab.engine.attribution import Attribution, attribute
from attnlab.engine.capture import Captured
from attnlab.methods.method import as_scores


def attribution(model: PreTrainedModel, example: Captured, engine: dict[str, Any]
                ) -> Attribution:
    """The engine's attribution of one example (its heads apart, its completeness residuals);
    `engine`: the keyword arguments of `attribute`."""
    target = torch.tensor([example.target], device=example.probs.device)
    return attribute(model, example.inputs, target, **engine)


def attattr(model: PreTrainedModel, example: Captured, engine: dict[str, Any]) -> torch.Tensor:
    """a^l_ij of one example as (L, n, n)."""
    return attribution(model, example, engine).attr[0].sum(dim=1)


def score(model: PreTrainedModel, captured: Captured, engine: dict[str, Any]) -> np.ndarray:
    return as_scores(attattr(model, captured, engine))
