"""Distances between probability distributions over the last dimension."""

from __future__ import annotations

import torch


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """TVD(p, q) = ½ Σ |p − q|, in [0, 1]."""
    return 0.5 * (p - q).abs().sum(dim=-1)


def jensen_shannon(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """JSD(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m), m = ½ (p + q), in nats: [0, ln 2]. Zero entries
    contribute nothing (0 log 0 = 0), so distributions over padded positions are fine."""
    m = 0.5 * (p + q)

    def kl_to_m(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x * (x.clamp_min(1e-30).log() - m.clamp_min(1e-30).log()),
                           torch.zeros_like(x)).sum(dim=-1)

    return 0.5 * kl_to_m(p) + 0.5 * kl_to_m(q)
