"""Claims: a paper's statement judged on this run, one row of a stage's claims table."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)

# `reason`: why a claim is not testable (empty for a claim that was judged).
COLUMNS = ["stage", "claim", "metric", "value", "verdict", "reason"]


@dataclass(frozen=True)
class NotTestable:
    """A claim the data or the configuration cannot test, and why (e.g. no sequence is long
    enough): its verdict is "not testable", with this reason instead of a judgement."""

    reason: str


def claim(
    stage: str, statement: str, metric: str, value: float, holds: bool | NotTestable
) -> dict[str, Any]:
    """One row of a claims table; the verdict follows from `holds`, computed by the caller, or
    is "not testable" with the reason `holds` gives."""
    if isinstance(holds, NotTestable):
        verdict, reason = "not testable", holds.reason
    elif holds is None:
        raise TypeError(f"claim {statement!r}: a claim that cannot be judged needs a "
                        "NotTestable with its reason")
    else:
        verdict, reason = ("holds" if holds else "does not hold"), ""
    return {"stage": stage, "claim": statement, "metric": metric, "value": float(value),
            "verdict": verdict, "reason": reason}


def claims_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A claims table of `claim` rows; it has the claims columns also when there are none."""
    return pd.DataFrame(rows, columns=COLUMNS)


def log_claims(claims: pd.DataFrame, task: str | None = None) -> None:
    """Log every claim of a stage's claims table with its value and verdict."""
    prefix = f"{task}: " if task else ""
    for row in claims.itertuples():
        why = f" ({row.reason})" if getattr(row, "reason", "") else ""
        log.info("%s%s: %.4g -> %s%s", prefix, row.claim, row.value, row.verdict, why)
