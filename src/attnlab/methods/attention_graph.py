"""Attention read as a graph over token positions: what raw attention, attention rollout and
attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", ACL) share.

Every score of these methods is indexed [l, i, j]: layer l (0-based), position i as a query
of layer l (equivalently, position i in layer l's output), position j as a key. Given the
attention probabilities A^l_h of the H heads of each layer, restricted to one example's n real
tokens:

    raw attention  A^l = (1/H) Σ_h A^l_h                      (the head mean)
    residual       Ã^l = ½ A^l + ½ I                           (the residual connection as an
                                                                identity edge; rows sum to 1)
    rolled out     R^l = M^l M^{l−1} ... M^0                   (per-layer mixing matrices M
                                                                composed as if linear: rollout,
                                                                ALTI, GlobEnc)
"""

from __future__ import annotations

import numpy as np


def head_mean(probs: np.ndarray) -> np.ndarray:
    """Raw attention A^l = (1/H) Σ_h A^l_h of (L, H, n, n) probabilities, as (L, n, n)."""
    return probs.mean(axis=1)


def residual_attention(attention: np.ndarray) -> np.ndarray:
    """Ã^l = ½ A^l + ½ I of (L, n, n) head-mean attention."""
    return 0.5 * attention + 0.5 * np.eye(attention.shape[-1])


def roll_out(mixing: np.ndarray) -> np.ndarray:
    """R^l = M^l M^{l−1} ... M^0 of (L, n, n) per-layer mixing matrices M^l."""
    out = np.empty_like(mixing)
    product = np.eye(mixing.shape[-1])
    for layer, matrix in enumerate(mixing):
        product = matrix @ product
        out[layer] = product
    return out
