"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL).

With Ã^l the residual attention of layer l (attnlab.methods.attention_graph),

    R^0 = Ã^0,  R^l = Ã^l R^{l−1}

R^l_ij is the share of input token j in position i after layer l: rollout multiplies the
layers' mixing as if it were linear.
"""

from __future__ import annotations

import numpy as np

from attnlab.methods.attention_graph import residual_attention, roll_out


def rollout(attention: np.ndarray) -> np.ndarray:
    """Attention rollout R^l = Ã^l Ã^{l−1} ... Ã^0 of (L, n, n) head-mean attention."""
    return roll_out(residual_attention(attention))


score = rollout  # its scores are the rollout itself
