"""Raw attention: the head mean A^l = (1/H) Σ_h A^l_h (attnlab.methods.attention_graph), what
the claims hold AttAttr against."""

from __future__ import annotations

import numpy as np


def score(attention: np.ndarray) -> np.ndarray:
    return attention
