"""What a reader of the report sees first: every finding of the run grouped by the paper (or
comparison) it tests and by stage, with this run's estimate and interval, its bar, its verdict
(over seeds: with "k of n"), its source and, where the configuration runs controls, the same
finding on each control run, flagged when it holds there too; a finding the configuration
cannot test says why instead. Checks (what follows from the mathematics or the construction)
are counted apart and never as findings.

The report's landing page (workflow/report/workflow.rst) holds `landing_html`, which rule claims
writes beside its claims page; the table it is built from is results/<name>/report/
findings.parquet, and `python -m attnlab.report.findings results/<name> [report.html]` prints
its few lines of summary (what `make run` prints at its end).
"""

from __future__ import annotations

import html
import os
import re
import sys
from pathlib import Path

import pandas as pd

from attnlab.analyses.verdicts import CEILING, FLOOR, VERDICTS, Bar

# The papers and comparisons, each with its short name (make run's lines) and the stages whose
# claims test it, in the report's order.
GROUPS: list[tuple[str, str, tuple[str, ...]]] = [
    ("Hao et al. 2021, Self-Attention Attribution", "Hao et al. 2021",
     ("ground_truth", "per_layer", "global", "task_correlation", "trees", "triggers",
      "attack")),
    ("Brunner et al. 2020, On Identifiability in Transformers", "Brunner et al. 2020",
     ("effective_attention", "token_identifiability", "token_mixing")),
    ("Is attention explanation? (Jain & Wallace 2019; Drozdyuk et al.)",
     "Attention as explanation",
     ("attention_ranking", "attention_permutation", "adversarial_keys",
      "adversarial_attention")),
    ("Interaction methods compared", "Interaction methods", ("interaction_methods",)),
    ("Induction heads in a decoder (Olsson et al. 2022)", "Induction heads",
     ("induction", "induction_heads")),
    # statements no paper makes (papers/attnlab.yaml)
    ("This project's own findings", "attnlab", ("per_layer_label",)),
]
# A stage no group names (a new one) is shown last, under this heading.
OTHER = "Other stages"
# What each stage's claims are about, as a heading.
STAGES = {
    "ground_truth": "attribution finds the planted token pairs (synthetic tasks)",
    "per_layer": "pruning heads within each layer (Fig. 3)",
    "per_layer_label": "pruning heads within each layer: the label that ranks them (beside "
                       "Hao et al. 2021 Fig. 3)",
    "global": "pruning heads over the whole model (Fig. 4)",
    "task_correlation": "head importance across tasks (Fig. 5)",
    "trees": "attribution trees",
    "triggers": "over-confident triggers mined from attribution (§6)",
    "attack": "the triggers as an adversarial attack (§6)",
    "effective_attention": "effective attention (§3)",
    "token_identifiability": "token identifiability (§4)",
    "token_mixing": "token mixing (§5)",
    "attention_ranking": "attention against gradient and leave-one-out importance (Jain & "
                         "Wallace 2019, §4.1)",
    "attention_permutation": "permuted attention (Drozdyuk et al.)",
    "adversarial_keys": "adversarial keys (Drozdyuk et al.)",
    "adversarial_attention": "adversarial attention (Jain & Wallace 2019)",
    "interaction_methods": "attribution against other interaction methods",
    "induction": "attribution finds the planted induction path (next-token tasks)",
    "induction_heads": "the heads each score ranks top, proven by mean ablation (next-token "
                       "tasks)",
}
# The outcome of a claim, by its verdict (attnlab.analyses.verdicts; a claim without an
# interval over seeds: "holds in k of n seeds").
HOLDS, FAILS, INCONCLUSIVE, UNTESTABLE = VERDICTS
SOME = "holds in some seeds"
OUTCOMES = (HOLDS, FAILS, SOME, INCONCLUSIVE, UNTESTABLE)
K_OF_N = re.compile(r"holds in (\d+) of (\d+)")


def group_of(stage: str) -> str:
    """The paper or comparison whose group shows `stage`'s claims."""
    return next((title for title, _, stages in GROUPS if stage in stages), OTHER)


def outcome(verdict: str) -> str:
    """One of OUTCOMES for a claims table's verdict."""
    # a finding over seeds: "<the run's verdict>: holds in k of n seeds" (verdicts.over_seeds)
    judged = verdict.partition(": ")[0]
    if judged in VERDICTS:
        return judged
    match = K_OF_N.match(verdict)
    if match:
        k, n = int(match[1]), int(match[2])
        return HOLDS if k == n else FAILS if k == 0 else SOME
    if verdict not in OUTCOMES:
        raise ValueError(f"unknown verdict {verdict!r} (known: {', '.join(OUTCOMES)})")
    return verdict


def grouped(table: pd.DataFrame) -> pd.DataFrame:
    """The claims table (summary.claims_table) with its `group` and `outcome`, in the report's
    order: group, then stage, then the claims in the order their stage states them."""
    order = {stage: i for i, (_, _, stages) in enumerate(GROUPS) for stage in stages}
    out = table.assign(group=[group_of(s) for s in table["stage"]],
                       outcome=[outcome(v) for v in table["verdict"]],
                       _group=[order.get(s, len(GROUPS)) for s in table["stage"]],
                       _stage=[list(STAGES).index(s) if s in STAGES else len(STAGES)
                               for s in table["stage"]],
                       _claim=table.groupby("stage", sort=False).cumcount())
    # claims in the order of their first appearance (across tasks); tasks beside each other
    first = out.groupby(["stage", "claim"], sort=False)["_claim"].transform("min")
    out = out.assign(_claim=first).sort_values(["_group", "_stage", "stage", "_claim"],
                                               kind="stable")
    return out.drop(columns=["_group", "_stage", "_claim"]).reset_index(drop=True)


def findings_only(table: pd.DataFrame) -> pd.DataFrame:
    """The findings of a claims table, its checks left out."""
    return table[table["kind"] == "finding"]


def counts(table: pd.DataFrame) -> dict[str, int]:
    """How many findings of a grouped table have each outcome (every outcome, 0 included);
    checks are not counted."""
    seen = findings_only(table)["outcome"].value_counts()
    return {name: int(seen.get(name, 0)) for name in OUTCOMES}


def at_bound(table: pd.DataFrame) -> int:
    """How many findings of a grouped table are not testable because both sides of their
    comparison sit at the ceiling or the floor on every unit (`verdicts.difference`)."""
    findings = findings_only(table)
    reasons = findings["reason"].fillna("").astype(str)
    return int(((findings["outcome"] == UNTESTABLE)
                & reasons.str.startswith((CEILING, FLOOR))).sum())


def counts_line(numbers: dict[str, int], *, bounded: int = 0) -> str:
    """`counts` in words, leaving out the outcomes no finding has (but holds / does not hold);
    `bounded` of the not testable ones at a ceiling or floor (`at_bound`)."""
    shown = [f"{numbers[name]} {name}" + (f" ({bounded} at a ceiling or floor)"
                                          if name == UNTESTABLE and bounded else "")
             for name in OUTCOMES if numbers[name] or name in (HOLDS, FAILS)]
    return ", ".join(shown)


def findings_line(table: pd.DataFrame) -> str:
    """How many findings of a grouped table have each outcome, and how many of the not
    testable ones are at a ceiling or floor, in words."""
    return counts_line(counts(table), bounded=at_bound(table))


def checks_line(table: pd.DataFrame) -> str:
    """How many checks of a grouped table there are and how many hold, do not or cannot be
    tested, in words."""
    checks = table[table["kind"] == "check"]
    seen = checks["outcome"].value_counts()
    outcomes = ", ".join(f"{n} {name}" for name, n in seen.items())
    return f"{len(checks)} checks" + (f": {outcomes}" if outcomes else "")


def flagged(table: pd.DataFrame) -> pd.DataFrame:
    """The findings that hold and hold on a control run too (summary.with_controls)."""
    return table[table["flag"] != ""]


def interval_text(low: float, high: float) -> str:
    """An interval (—: none)."""
    return "—" if pd.isna(low) else f"[{low:.3g}, {high:.3g}]"


def number_text(value: float, low: float, high: float) -> str:
    """An estimate and its interval, where it has one (—: no estimate)."""
    if pd.isna(value):
        return "—"
    return f"{value:.3g}" + ("" if pd.isna(low) else f" {interval_text(low, high)}")


def bar_text(value: float, side: str) -> str:
    """A finding's bar, e.g. "> 0.5" (—: a claim without one)."""
    return "—" if pd.isna(value) else str(Bar(float(value), side))


def control_names(table: pd.DataFrame) -> list[str]:
    """The controls whose columns the table has (summary.with_controls)."""
    return [c.removesuffix("_verdict") for c in table.columns
            if c.endswith("_verdict") and c != "verdict"]


def control_text(row: pd.Series, name: str) -> str:
    """A finding's number and verdict on the control run `name` (—: none)."""
    if not isinstance(row[f"{name}_verdict"], str):
        return "—"
    number = number_text(row[f"{name}_value"], row[f"{name}_low"], row[f"{name}_high"])
    return f"{number} {row[f'{name}_verdict']}"


def _verdict(row: pd.Series) -> str:
    verdict = html.escape(row["verdict"])
    reason = row.get("reason")
    if row["outcome"] == UNTESTABLE and isinstance(reason, str) and reason:
        verdict += f": {html.escape(reason)}"
    return verdict


def _controls(row: pd.Series, names: list[str]) -> str:
    """A finding's number and verdict on each control run, and its flag."""
    parts = [f"{html.escape(name)}: {html.escape(control_text(row, name))}" for name in names]
    if row["flag"]:
        parts.append(f"<b>flag: {html.escape(row['flag'])}</b>")
    return "<br>".join(parts)


# The colour of each outcome, so that a glance finds what failed.
COLOURS = {HOLDS: "#e6f4e6", FAILS: "#fbe3e3", SOME: "#fdf3d8", INCONCLUSIVE: "#fdf3d8",
           UNTESTABLE: "#eeeeee"}
# A stage that judges one statement several times on a task (adversarial attention: once per
# layer) names what tells the rows apart at the start of the metric, before this separator.
PART = ": "


def row_label(row: pd.Series, repeated: bool) -> str:
    """What a landing row is about: its task (or every task) and, where its finding is judged
    several times on that task (`repeated`), the part its metric names (e.g. "layer 2")."""
    label = row["task"] if isinstance(row["task"], str) else "every task"
    if repeated and PART in row["metric"]:
        label += f", {row['metric'].partition(PART)[0]}"
    return label


def number_html(row: pd.Series) -> str:
    """A finding's estimate, interval and number of units (—: not testable)."""
    number = html.escape(number_text(row["value"], row["low"], row["high"]))
    if not pd.isna(row["n"]):
        number += f"<br><small>n = {int(row['n'])}</small>"
    return number


# The picture of a finding's interval against its bar: its width and height in pixels.
PICTURE = (140, 16)


def interval_svg(value: float, low: float, high: float, bar: float, side: str) -> str:
    """A small picture of a finding: the side of the bar on which it holds shaded green, the bar
    a black tick, the 95 % interval a line and the estimate a dot, on an axis spanning them all
    (empty where the finding has no interval or no bar)."""
    if pd.isna(low) or pd.isna(bar):
        return ""
    width, height = PICTURE
    lo, hi = min(low, bar, value), max(high, bar, value)
    pad = (hi - lo) * 0.1 or max(abs(bar) * 0.1, 0.05)
    lo, hi = lo - pad, hi + pad

    def x(v: float) -> float:
        return round((v - lo) / (hi - lo) * width, 1)

    shade = (x(bar), width - x(bar)) if side == "above" else (0, x(bar))
    middle = height / 2
    return (f"<svg class='interval' width='{width}' height='{height}' role='img'>"
            f"<title>{html.escape(number_text(value, low, high))}, bar "
            f"{html.escape(bar_text(bar, side))}</title>"
            f"<rect x='{shade[0]}' y='0' width='{shade[1]}' height='{height}' fill='#cdebcd'/>"
            f"<line class='bar' x1='{x(bar)}' x2='{x(bar)}' y1='0' y2='{height}' "
            "stroke='black' stroke-width='2'/>"
            f"<line class='ci' x1='{x(low)}' x2='{x(high)}' y1='{middle}' y2='{middle}' "
            "stroke='#333' stroke-width='2'/>"
            f"<circle class='estimate' cx='{x(value)}' cy='{middle}' r='3.5' fill='#333'/></svg>")


def _stage_rows(stage: str, claims: pd.DataFrame, controls: list[str], width: int) -> list[str]:
    """The landing table's rows of one stage: its heading, then one row per finding and task
    (a finding's name and source once for its tasks)."""
    rows = [f"<tr class='stage'><td colspan='{width}'><i>{html.escape(STAGES.get(stage, stage))}"
            f"</i> ({html.escape(stage)})</td></tr>"]
    repeated = claims.duplicated(["claim", "task"], keep=False)
    previous = None
    for (_, row), several in zip(claims.iterrows(), repeated, strict=True):
        finding = "" if row["claim"] == previous else html.escape(row["claim"])
        if finding and row["source"]:
            finding += f"<br><small>{html.escape(row['source'])}</small>"
        previous = row["claim"]
        cells = [finding, html.escape(row_label(row, several)),
                 f"<small>{html.escape(row['metric'])}</small>", number_html(row),
                 html.escape(bar_text(row["bar"], row["side"]))
                 + interval_svg(row["value"], row["low"], row["high"], row["bar"], row["side"]),
                 _verdict(row), *([_controls(row, controls)] if controls else [])]
        rows.append(f"<tr style='background: {COLOURS[row['outcome']]}'>"
                    + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return rows


# Snakemake's report (9.x) shows the first page in a box it centres vertically in the window
# (flex, items-center) and holds to a narrow column (prose max-w-lg): a page taller than the
# window then starts above it, where no scrolling reaches, and the tables wrap every word. These
# rules, scoped to the box that holds LANDING_ID, start it at the top and give it the window's
# width, with the rule graph beside it moved below.
LANDING_ID = "attnlab-findings"
LANDING_STYLE = f"""<style>
div.h-screen:has(#{LANDING_ID}) {{ align-items: flex-start; }}
div.flex:has(> div > div.prose #{LANDING_ID}) {{ flex-wrap: wrap; }}
div.prose:has(#{LANDING_ID}) {{ max-width: none; }}
#{LANDING_ID} table {{ border-collapse: collapse; width: 100%; }}
#{LANDING_ID} td, #{LANDING_ID} th {{ padding: 3px 6px; vertical-align: top; }}
#{LANDING_ID} tr.stage td {{ padding-top: 10px; }}
</style>"""


def landing_html(table: pd.DataFrame) -> str:
    """The findings as an HTML fragment for the report's first page: their counts, then per
    group its counts and one row per finding and task (finding with its source, what is
    measured, this run's estimate, interval and units, the bar with a picture of the interval
    against it, the verdict, and each control's); then the checks' counts."""
    table = grouped(table)
    controls = control_names(table)
    findings = findings_only(table)
    flags = f"; {len(flagged(findings))} hold on a control run too, flagged" if controls else ""
    parts = [LANDING_STYLE, f"<div id='{LANDING_ID}'>",
             f"<p class='counts'><b>{html.escape(findings_line(table))}</b> (findings of "
             f"this run, one per task they were judged on{flags}); "
             f"{html.escape(checks_line(table))}, apart.</p>"]
    header = ["finding", "judged on", "measured as", "this run [95 % interval]",
              "bar (green: where it holds)", "verdict", *(["controls"] if controls else [])]
    for group, rows in findings.groupby("group", sort=False):
        parts.append(f"<h3>{html.escape(group)}: {html.escape(findings_line(rows))}</h3>")
        parts.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>")
        for stage, claims in rows.groupby("stage", sort=False):
            parts += _stage_rows(stage, claims, controls, len(header))
        parts.append("</table>")
    parts.append(f"<p>{html.escape(checks_line(table))} (what follows from the mathematics or "
                 "the construction, not counted as findings: the claims page lists them).</p>")
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def _where(rows: pd.DataFrame) -> str:
    """The tasks of a failed claim's rows, each with its "holds in k of n seeds" where it holds
    in some seeds."""
    parts = []
    for task, verdict, result in zip(rows["task"], rows["verdict"], rows["outcome"], strict=True):
        part = task if isinstance(task, str) else ""
        if result == SOME:
            part = f"{part} {verdict}".strip()
        if part:
            parts.append(part)
    return ", ".join(parts)


# A stage with more failed claims than this (the interaction methods: one per measure and
# method pair) lists this many in `make run`'s lines, and how many more there are.
FAILED_PER_STAGE = 3


def _failed_lines(failed: pd.DataFrame) -> list[str]:
    """One line per failed claim of a grouped table (by group, stage and name, with its
    tasks), at most FAILED_PER_STAGE a stage and how many more."""
    short = {title: name for title, name, _ in GROUPS}
    lines = []
    for (group, stage), claims in failed.groupby(["group", "stage"], sort=False):
        names = list(claims.groupby("claim", sort=False))
        shown = names[:FAILED_PER_STAGE] if len(names) > FAILED_PER_STAGE + 1 else names
        for name, rows in shown:
            where = _where(rows)
            lines.append(f"  {short.get(group, group)} / {stage}: {name}"
                         + (f" ({where})" if where else ""))
        if len(names) > FAILED_PER_STAGE + 1:
            lines.append(f"  {short.get(group, group)} / {stage}: and "
                         f"{len(names) - FAILED_PER_STAGE} more claims (on the report's first "
                         "page)")
    return lines


def summary_lines(table: pd.DataFrame, report: str | os.PathLike) -> list[str]:
    """The few lines `make run` prints at its end: where the report is, how many findings hold,
    do not or cannot be tested, how many hold on a control run too, which do not hold (by
    name, with their tasks), and the checks apart (which fail, by name)."""
    table = grouped(table)
    findings = findings_only(table)
    lines = [f"Report: {report}",
             f"Findings: {findings_line(table)} (by paper and stage on the report's first "
             "page)"]
    if control_names(table):
        lines.append(f"Hold on a control run too (flagged): {len(flagged(findings))}")
    failed = findings[findings["outcome"].isin([FAILS, SOME])]
    if len(failed):
        lines += ["Do not hold:", *_failed_lines(failed)]
    lines.append(f"Checks, not counted as findings: {checks_line(table)}")
    checks = table[table["kind"] == "check"]
    failed_checks = checks[checks["outcome"].isin([FAILS, SOME])]
    if len(failed_checks):
        lines += ["Checks that fail:", *_failed_lines(failed_checks)]
    return lines


# Where rule claims writes the table the landing page is built from.
FINDINGS_TABLE = Path("report") / "findings.parquet"


def main(argv: list[str]) -> int:
    """`python -m attnlab.report.findings results/<name> [report]`: print summary_lines."""
    if not 1 <= len(argv) <= 2:
        print("usage: python -m attnlab.report.findings results/<name> [report.html]",
              file=sys.stderr)
        return 2
    results = Path(argv[0])
    path = results / FINDINGS_TABLE
    if not path.is_file():
        print(f"no findings yet: {path} is missing (rule claims writes it)", file=sys.stderr)
        return 1
    report = argv[1] if len(argv) > 1 else results / "report.html"
    print("\n".join(summary_lines(pd.read_parquet(path), report)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
