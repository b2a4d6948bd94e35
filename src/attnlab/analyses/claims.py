"""Claims: a paper's statement judged on this run, one row of a stage's claims table.

A row is of one of two kinds: a *finding*, an empirical statement of a paper, judged by the
verdict rules (`attnlab.analyses.verdicts`: its estimate, interval, bar and one of the four
verdicts; `finding`), or a *check*, what follows from the mathematics or the construction (a
bug detector, never counted as a finding), judged on its point estimate by `claim`.

A finding about what training put into a model (its source is `learned`) is not testable on a
model that did not learn its task (`unlearned`, applied to a stage's table by `on_models`): an
untrained model's prediction hardly depends on its input, so nothing that changes its attention
can hurt it, and its attention has learned nothing to rank or to find.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from attnlab.analyses import verdicts
from attnlab.analyses.verdicts import HOLDS, UNTESTABLE, Bar, Interval, verdict

log = logging.getLogger(__name__)

# One file per paper: the statements the findings judge, each under a key (`source`).
PAPERS = Path(__file__).with_name("papers")

# `kind`: "finding" or "check". `value`: the estimate; `low`, `high`: its interval over `n`
# units; `scale_low`, `scale_high`: the least and greatest value the measure can take
# (`verdicts.Interval.scale`: 0 and 1 for a share, -inf and inf for a measure without bounds),
# which the interval pooled over seeds keeps to; `bar`, `side`: the verdict's bar and the side
# of it the interval must lie on ("above", "below"); `reason`: why a claim is not testable
# (empty for a claim that was judged); `source`: the paper, its section or figure and the
# statement (`Source`); `learned`: whether that statement is about what training put into a
# model (`on_models`). A row without an interval (made by `claim`, or not testable for want of
# data) has NaN for its interval and scale; a row made by `claim` has no bar or source either
# (NaN, empty) and is not `learned`. A finding its interval cannot judge (at the ceiling or the
# floor, or an interval of no width: `verdicts.untestable`) is not testable with its value,
# interval and scale shown.
COLUMNS = ["stage", "claim", "kind", "metric", "value", "low", "high", "n", "scale_low",
           "scale_high", "bar", "side", "verdict", "reason", "source", "learned"]
KINDS = ("finding", "check")


@dataclass(frozen=True)
class NotTestable:
    """A claim the data or the configuration cannot test, and why (e.g. no sequence is long
    enough): its verdict is "not testable", with this reason instead of a judgement."""

    reason: str


@dataclass(frozen=True)
class Source:
    """Where a finding comes from: the paper, its section, figure or table, and the statement
    (in the paper's words or as close as we can cite them). `learned`: the statement is about
    what training put into a model (the paper's file says, `learned`), not about what any
    model of the architecture does."""

    paper: str
    where: str
    statement: str
    learned: bool = False

    def __str__(self) -> str:
        return f"{self.paper}, {self.where}: {self.statement}"


@cache
def paper(name: str) -> dict[str, Any]:
    """A paper's file of statements (papers/<name>.yaml): its title, how it is cited, and its
    statements by key."""
    path = PAPERS / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PAPERS.glob("*.yaml")))
        raise KeyError(f"no statements file for paper {name!r} (known: {known})")
    return yaml.safe_load(path.read_text())


def source(name: str, key: str) -> Source:
    """The statement `key` of paper `name`, as a finding's source."""
    statements = paper(name)["statements"]
    if key not in statements:
        raise KeyError(f"paper {name!r} has no statement {key!r} (papers/{name}.yaml: "
                       f"{', '.join(statements)})")
    entry = statements[key]
    return Source(paper(name)["cite"], entry["where"], entry["statement"],
                  learned=paper(name)["learned"])


def _row(stage: str, statement: str, metric: str, value: float, verdict: str, reason: str,
         **more: Any) -> dict[str, Any]:
    return {"stage": stage, "claim": statement, "kind": "finding", "metric": metric,
            "value": float(value), "low": math.nan, "high": math.nan, "n": math.nan,
            "scale_low": math.nan, "scale_high": math.nan, "bar": math.nan, "side": "",
            "verdict": verdict, "reason": reason, "source": "", "learned": False, **more}


def claim(
    stage: str, statement: str, metric: str, value: float, holds: bool | NotTestable, *,
    kind: str = "finding",
) -> dict[str, Any]:
    """One row of a claims table judged on a point estimate (the workflow's checks; its
    findings are `finding`'s); the verdict follows from `holds`, computed by the caller, or is
    "not testable" with the reason `holds` gives."""
    if kind not in KINDS:
        raise ValueError(f"claim {statement!r}: kind is one of {KINDS}, not {kind!r}")
    if isinstance(holds, NotTestable):
        return _row(stage, statement, metric, value, UNTESTABLE, holds.reason, kind=kind)
    if holds is None:
        raise TypeError(f"claim {statement!r}: a claim that cannot be judged needs a "
                        "NotTestable with its reason")
    return _row(stage, statement, metric, value, "holds" if holds else "does not hold", "",
                kind=kind)


def finding(
    stage: str,
    statement: str,
    metric: str,
    interval: Interval | NotTestable,
    bar: Bar,
    source: Source,
) -> dict[str, Any]:
    """One finding's row: its estimate and interval (with its scale) judged against `bar` by
    `verdicts.verdict`, or "not testable" with the reason: where the data or the configuration
    cannot test it (value, interval and scale NaN), or where its interval cannot judge it
    (`verdicts.untestable`: at the ceiling or the floor, or of no width; value, interval and
    scale shown)."""
    judged = {"bar": float(bar.value), "side": bar.side, "source": str(source),
              "learned": source.learned}
    if isinstance(interval, NotTestable):
        return _row(stage, statement, metric, math.nan, UNTESTABLE, interval.reason, **judged)
    why = verdicts.untestable(interval)
    return _row(stage, statement, metric, interval.estimate,
                UNTESTABLE if why else verdict(interval, bar), why,
                low=interval.low, high=interval.high, n=interval.n,
                scale_low=interval.scale[0], scale_high=interval.scale[1], **judged)


def unlearned(metrics: Mapping[str, Any]) -> NotTestable | None:
    """None when the model learned its task, otherwise why not: its dev accuracy's 95 %
    interval (a share of its n_dev examples: `verdicts.share`) must lie above chance, the
    majority-class rate of the dev labels (`metrics`: fine-tuning's, rule finetune)."""
    n, chance = int(metrics["n_dev"]), float(metrics["dev_chance"])
    right = round(float(metrics["dev_accuracy"]) * n)
    accuracy = verdicts.share(np.repeat([1.0, 0.0], [right, n - right]))
    if verdict(accuracy, Bar(chance)) == HOLDS:
        return None
    return NotTestable(
        f"the model did not learn its task: dev accuracy {accuracy.estimate:.3g} "
        f"[{accuracy.low:.3g}, {accuracy.high:.3g}] over {n} examples is not above chance "
        f"({chance:.3g}, the majority class)")


def on_models(claims: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """`claims` with its `learned` findings not testable where a model they were measured on
    did not learn its task (`metrics`: task -> fine-tuning's metrics of every such model); the
    estimate and interval stay, shown but not judged."""
    reasons = [f"{task}: {why.reason}" if len(metrics) > 1 else why.reason
               for task, fit in metrics.items() if (why := unlearned(fit)) is not None]
    if not reasons:
        return claims
    claims = claims.copy()
    # a finding with an interval that its data could not judge (at a ceiling, of no width) is
    # not testable first because the model learned nothing
    judged = (claims["verdict"] != UNTESTABLE) | claims["low"].notna()
    affected = claims["learned"].astype(bool) & judged
    claims.loc[affected, "verdict"] = UNTESTABLE
    claims.loc[affected, "reason"] = "; ".join(reasons)
    return claims


def claims_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A claims table of `claim` rows; it has the claims columns also when there are none."""
    return pd.DataFrame(rows, columns=COLUMNS)


def log_claims(claims: pd.DataFrame, task: str | None = None) -> None:
    """Log every claim of a stage's claims table with its value, interval where it has one,
    and verdict."""
    prefix = f"{task}: " if task else ""
    for row in claims.itertuples():
        why = f" ({row.reason})" if getattr(row, "reason", "") else ""
        low, high = getattr(row, "low", math.nan), getattr(row, "high", math.nan)
        interval = "" if pd.isna(low) else f" [{low:.4g}, {high:.4g}]"
        log.info("%s%s: %.4g%s -> %s%s", prefix, row.claim, row.value, interval, row.verdict,
                 why)
