"""Head importance across tasks (Hao et al. 2021 §4, Fig. 5): Pearson r between the
attribution head-importance vectors of every pair of tasks, and the paper's statements that
similar tasks correlate strongly and dissimilar ones weakly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from attnlab.analyses.claims import NotTestable, claim
from attnlab.plumbing.errors import AttnlabError, ConfigError

# "Strongly correlated" in the paper's sense (its Fig. 5 contrasts a high MNLI–RTE r with a
# low MNLI–SST-2 r); 0.5 is the usual boundary of a strong Pearson correlation.
STRONG_R = 0.5


def task_correlations(importance: pd.DataFrame, method: str = "attribution") -> pd.DataFrame:
    """Pearson r between the head-importance vectors of every pair of tasks (task_a < task_b in
    the order of first appearance): columns task_a, task_b, r, heads."""
    wide = (importance[importance["method"] == method]
            .pivot_table(index=["layer", "head"], columns="task", values="importance", sort=False))
    if wide.isna().any().any():
        raise AttnlabError("task_correlation: the tasks' models have different numbers of heads")
    names = list(wide.columns)
    rows = [{"task_a": a, "task_b": b, "r": float(np.corrcoef(wide[a], wide[b])[0, 1]),
             "heads": len(wide)}
            for i, a in enumerate(names) for b in names[i + 1:]]
    return pd.DataFrame(rows, columns=["task_a", "task_b", "r", "heads"])


def _pair_r(correlations: pd.DataFrame, pair: list[str]) -> float:
    a, b = pair
    hit = correlations[((correlations["task_a"] == a) & (correlations["task_b"] == b))
                       | ((correlations["task_a"] == b) & (correlations["task_b"] == a))]
    if hit.empty:
        raise ConfigError(f"heads pairs: no correlation of tasks {a!r} and {b!r} (are both tasks?)")
    return float(hit["r"].iloc[0])


def why_not_comparable(model: Mapping[str, Any], tasks: Mapping[str, Mapping[str, Any]]
                       ) -> NotTestable | None:
    """Why the configuration cannot test the paper's cross-task statements, or None. They
    compare head h across the tasks' models, as the paper's tasks share one pre-trained BERT
    and share language: models built from scratch without a shared start (model.pretrain) have
    unrelated heads, and synthetic tasks share no words or planted pairs (each kind has its
    own), so no head has a reason to matter for two of them alike."""
    reasons = []
    if model["source"] == "scratch" and not model["pretrain"]["epochs"]:
        reasons.append("each task's model starts from its own random weights (model.source "
                       "scratch, model.pretrain.epochs 0), so head h of one model has no "
                       "counterpart in another")
    synthetic = [name for name, task in tasks.items() if task["source"] == "synthetic"]
    if synthetic:
        reasons.append(f"synthetic tasks ({', '.join(synthetic)}) share no words or planted "
                       "pairs, so the papers' similar and dissimilar tasks have no counterpart")
    return NotTestable("; ".join(reasons)) if reasons else None


def cross_task_claims(
    correlations: pd.DataFrame, similar: list[list[str]], dissimilar: list[list[str]], *,
    untestable: NotTestable | None = None,
) -> list[dict[str, Any]]:
    """The paper's Fig. 5 statements on the configured similar and dissimilar task pairs; the
    pair a claim is about is its `task` (a claim on every pair has none). With `untestable`
    (why_not_comparable) each is "not testable", its r shown but not judged."""
    similar_r = {"–".join(p): _pair_r(correlations, p) for p in similar}
    dissimilar_r = {"–".join(p): _pair_r(correlations, p) for p in dissimilar}
    claims = [{"task": pair, **claim(
        "task_correlation", "similar tasks correlate strongly",
        f"Pearson r of attribution importance (holds if >= {STRONG_R})", r,
        untestable or r >= STRONG_R)}
        for pair, r in similar_r.items()]
    claims += [{"task": pair, **claim(
        "task_correlation", "dissimilar tasks correlate weakly",
        f"Pearson r of attribution importance (holds if < {STRONG_R})", r,
        untestable or r < STRONG_R)}
        for pair, r in dissimilar_r.items()]
    if similar_r and dissimilar_r:
        gap = min(similar_r.values()) - max(dissimilar_r.values())
        claims.append({"task": None, **claim(
            "task_correlation", "similar tasks correlate more than dissimilar ones",
            "lowest r of a similar pair minus highest r of a dissimilar pair (holds if > 0)",
            gap, untestable or gap > 0)})
    return claims
