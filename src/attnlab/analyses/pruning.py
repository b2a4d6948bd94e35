"""Head pruning without re-training (Hao et al. 2021 §4, docs/methods.md), and the paper's claims.

* Per-layer effectiveness (paper Fig. 3): rank the heads within each layer by each example's
  own attr_max (or attn_max; a decoder's attention at its query, `heads.ranking_scores`) and
  mask k of them in every layer at once, lowest or highest first.
* Global pruning (Fig. 4): rank all L·H heads by dataset-level importance and mask the lowest
  p %.
* Claims: the paper's statements checked against these curves, each with a computed verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.analyses.claims import claim
from attnlab.engine import examples

RANKINGS = ("attribution", "attention")
ORDERS = ("lowest", "highest")

# "Barely hurts": pruning half the heads of every layer, lowest attribution first, may cost at
# most 5 accuracy points (the paper's Fig. 3 curves stay within a few points up to half).
LOW_PRUNE_TOLERANCE = 0.05
# Two curves on the same examples differ when their mean accuracies differ by at least one
# point; a smaller gap is within the noise of one model on a few hundred examples.
CURVE_GAP = 0.01
# "Competitive with Taylor": the area under attribution's global-pruning curve (mean accuracy
# over the pruned fraction) is at most 5 points below Taylor's.
AUC_MARGIN = 0.05
# The paper's MNLI result: 84 % accuracy with every head, about 60 % with only 10 % kept.
PAPER_RETENTION = 0.60 / 0.84


def per_layer_mask(scores: torch.Tensor, k: int, order: str) -> torch.Tensor:
    """(N, L, H) mask removing, in every layer of every example, the k heads with the lowest
    (order "lowest") or highest scores of that example and layer. Ties: lower head index first."""
    n_heads = scores.shape[-1]
    rank = scores.argsort(dim=-1, stable=True).argsort(dim=-1)  # 0 = lowest score
    keep = rank >= k if order == "lowest" else rank < n_heads - k
    return keep.to(torch.float32)


def global_mask(importance: np.ndarray, percent: float) -> torch.Tensor:
    """(L, H) mask removing the round(p/100 · L·H) least important heads (halves round up;
    ties: lower flat index first)."""
    n_masked = math.floor(percent / 100 * importance.size + 0.5)
    order = np.argsort(importance.ravel(), kind="stable")
    keep = np.ones(importance.size, dtype=np.float32)
    keep[order[:n_masked]] = 0
    return torch.from_numpy(keep.reshape(importance.shape))


def _accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float((logits.argmax(-1) == labels).double().mean())


def _gold_probability(logits: torch.Tensor, labels: torch.Tensor) -> float:
    probs = torch.softmax(logits.double(), dim=-1)
    return float(probs.gather(1, labels[:, None]).mean())


def _predictor(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], batch_size: int
) -> Callable[[torch.Tensor], torch.Tensor]:
    """`examples.predict` under a head mask, run once per distinct mask: the curves share their
    ends (k = 0 and k = H of every ranking and order, 0 % and 100 % of every method)."""
    done: dict[bytes, torch.Tensor] = {}

    def predict(mask: torch.Tensor) -> torch.Tensor:
        key = mask.numpy().tobytes()
        if key not in done:
            done[key] = examples.predict(model, inputs, mask, batch_size)
        return done[key]

    return predict


def per_layer_curves(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    dump_arrays: dict[str, np.ndarray],
    batch_size: int = 64,
) -> pd.DataFrame:
    """Accuracy and mean gold-label probability against k for every ranking and order.

    `dump_arrays` holds each example's (N, L, H) scores by the names of RANKINGS, in the order of
    `inputs` (`heads.ranking_scores`).
    """
    predict = _predictor(model, inputs, batch_size)
    rows = []
    for ranking in RANKINGS:
        scores = torch.from_numpy(dump_arrays[ranking])
        for order in ORDERS:
            for k in range(scores.shape[-1] + 1):
                logits = predict(per_layer_mask(scores, k, order))
                rows.append({
                    "ranking": ranking, "order": order, "k": k,
                    "accuracy": _accuracy(logits, inputs["labels"]),
                    "gold_prob": _gold_probability(logits, inputs["labels"]),
                })
    return pd.DataFrame(rows)


def global_curves(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    importance: pd.DataFrame,
    percents: list[float],
    batch_size: int = 64,
) -> pd.DataFrame:
    """Accuracy against the percentage of heads masked, for every (method, seed) of an
    importance table (the random method has one curve per seed)."""
    n_layers, n_heads = importance["layer"].max() + 1, importance["head"].max() + 1
    predict = _predictor(model, inputs, batch_size)
    rows = []
    for (method, seed), group in importance.groupby(["method", "seed"], dropna=False, sort=False):
        scores = np.zeros((n_layers, n_heads))
        scores[group["layer"], group["head"]] = group["importance"]
        for percent in percents:
            mask = global_mask(scores, percent)
            rows.append({
                "method": method, "seed": seed, "percent": percent,
                "heads_masked": int((mask == 0).sum()),
                "accuracy": _accuracy(predict(mask), inputs["labels"]),
            })
    return pd.DataFrame(rows).astype({"seed": "Int64"})


def per_layer_claims(curves: pd.DataFrame) -> list[dict[str, Any]]:
    """The paper's Fig. 3 statements, judged on one task's per-layer curves."""
    n_heads = int(curves["k"].max())
    half = n_heads // 2
    interior = curves[(curves["k"] > 0) & (curves["k"] < n_heads)]
    mean = interior.groupby(["ranking", "order"])["accuracy"].mean()
    at = curves.set_index(["ranking", "order", "k"])["accuracy"]
    drop = at["attribution", "lowest", 0] - at["attribution", "lowest", half]
    low_vs_high = mean["attribution", "lowest"] - mean["attribution", "highest"]
    attr_vs_attn = mean["attention", "highest"] - mean["attribution", "highest"]
    return [
        claim(
            "per_layer", "pruning low-attribution heads barely hurts",
            f"accuracy drop with {half} of {n_heads} heads per layer pruned, lowest "
            f"attribution first (holds if <= {LOW_PRUNE_TOLERANCE})",
            drop, drop <= LOW_PRUNE_TOLERANCE),
        claim(
            "per_layer", "pruning high-attribution heads hurts more than low-attribution ones",
            f"mean accuracy over k=1..{n_heads - 1}, lowest-first minus highest-first "
            f"(holds if >= {CURVE_GAP})",
            low_vs_high, low_vs_high >= CURVE_GAP),
        claim(
            "per_layer", "pruning high-attribution heads hurts more than high-attention ones",
            f"mean accuracy over k=1..{n_heads - 1}, highest attention first minus highest "
            f"attribution first (holds if >= {CURVE_GAP})",
            attr_vs_attn, attr_vs_attn >= CURVE_GAP),
    ]


def curve_areas(curves: pd.DataFrame) -> pd.Series:
    """Area under each method's accuracy-vs-fraction-pruned curve (mean over random seeds)."""
    mean = curves.groupby(["method", "percent"])["accuracy"].mean().reset_index()
    return mean.groupby("method").apply(
        lambda g: np.trapezoid(g["accuracy"], g["percent"] / 100), include_groups=False
    )


def global_claims(curves: pd.DataFrame) -> list[dict[str, Any]]:
    """The paper's Fig. 4 statements, judged on one task's global curves (claims whose methods
    were not run are left out)."""
    methods = set(curves["method"])
    if "attribution" not in methods:
        return []
    area = curve_areas(curves)
    claims = []
    if "taylor" in methods:
        gap = area["attribution"] - area["taylor"]
        claims.append(claim(
            "global", "attribution is competitive with taylor",
            f"area under accuracy-vs-fraction-pruned, attribution minus taylor "
            f"(holds if >= -{AUC_MARGIN})", gap, gap >= -AUC_MARGIN))
    if "random" in methods:
        gap = area["attribution"] - area["random"]
        claims.append(claim(
            "global", "attribution beats a random head order",
            f"area under accuracy-vs-fraction-pruned, attribution minus random (mean of seeds; "
            f"holds if >= {CURVE_GAP})", gap, gap >= CURVE_GAP))
    at = curves[curves["method"] == "attribution"].set_index("percent")["accuracy"]
    if 0 in at.index and 90 in at.index:
        retention = at[90] / at[0] if at[0] > 0 else 0.0
        claims.append(claim(
            "global", "keeping 10% of heads (by attribution) keeps most of the accuracy",
            f"accuracy with 90% of heads pruned / accuracy with all heads (holds if >= "
            f"{PAPER_RETENTION:.3f}, the paper's MNLI 60/84)",
            retention, retention >= PAPER_RETENTION))
    return claims
