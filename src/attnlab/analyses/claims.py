"""Claims: a paper's statement judged on this run, one row of a stage's claims table."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)

COLUMNS = ["stage", "claim", "metric", "value", "verdict"]


def claim(
    stage: str, statement: str, metric: str, value: float, holds: bool | None
) -> dict[str, Any]:
    """One row of a claims table; the verdict follows from `holds`, computed by the caller
    (None: the data cannot test the claim, e.g. no sequence is long enough)."""
    verdict = "not testable" if holds is None else "holds" if holds else "does not hold"
    return {"stage": stage, "claim": statement, "metric": metric, "value": float(value),
            "verdict": verdict}


def claims_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A claims table of `claim` rows; it has the claims columns also when there are none."""
    return pd.DataFrame(rows, columns=COLUMNS)


def log_claims(claims: pd.DataFrame, task: str | None = None) -> None:
    """Log every claim of a stage's claims table with its value and verdict."""
    prefix = f"{task}: " if task else ""
    for row in claims.itertuples():
        log.info("%s%s: %.4g -> %s", prefix, row.claim, row.value, row.verdict)
