"""What a reader of the report sees first: every claim of the run grouped by the paper (or
comparison) it tests and by stage, with this run's number, its interval and "k of n" where
the claim has them, and the verdict; a claim the configuration cannot test says why instead.

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

from attnlab.analyses.verdicts import VERDICTS

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
     ("attention_permutation", "adversarial_keys", "adversarial_attention")),
    ("Interaction methods compared", "Interaction methods", ("interaction_methods",)),
    ("Induction heads in a decoder (Olsson et al. 2022)", "Induction heads", ("induction",)),
]
# A stage no group names (a new one) is shown last, under this heading.
OTHER = "Other stages"
# What each stage's claims are about, as a heading.
STAGES = {
    "ground_truth": "attribution finds the planted token pairs (synthetic tasks)",
    "per_layer": "pruning heads within each layer (Fig. 3)",
    "global": "pruning heads over the whole model (Fig. 4)",
    "task_correlation": "head importance across tasks (Fig. 5)",
    "trees": "attribution trees",
    "triggers": "over-confident triggers mined from attribution (§6)",
    "attack": "the triggers as an adversarial attack (§6)",
    "effective_attention": "effective attention (§3)",
    "token_identifiability": "token identifiability (§4)",
    "token_mixing": "token mixing (§5)",
    "attention_permutation": "permuted attention (Drozdyuk et al.)",
    "adversarial_keys": "adversarial keys (Drozdyuk et al.)",
    "adversarial_attention": "adversarial attention (Jain & Wallace 2019)",
    "interaction_methods": "attribution against other interaction methods",
    "induction": "attribution finds the planted induction path (next-token tasks)",
}
# The outcome of a claim, by its verdict (attnlab.analyses.verdicts; a run over seeds: "holds
# in k of n seeds").
HOLDS, FAILS, INCONCLUSIVE, UNTESTABLE = VERDICTS
SOME, UNTESTED = "holds in some seeds", "not tested by this run"
OUTCOMES = (HOLDS, FAILS, SOME, INCONCLUSIVE, UNTESTABLE, UNTESTED)
K_OF_N = re.compile(r"holds in (\d+) of (\d+)")
# The interval a claim's metric names (the interaction methods' paired bootstrap interval).
INTERVAL = re.compile(r"interval \[([^\]]+)\]")


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


def counts(table: pd.DataFrame) -> dict[str, int]:
    """How many claims of a grouped table have each outcome (every outcome, 0 included)."""
    seen = table["outcome"].value_counts()
    return {name: int(seen.get(name, 0)) for name in OUTCOMES}


def counts_line(numbers: dict[str, int]) -> str:
    """`counts` in words, leaving out the outcomes no claim has (but holds / does not hold)."""
    shown = [f"{numbers[name]} {name}" for name in OUTCOMES
             if numbers[name] or name in (HOLDS, FAILS)]
    return ", ".join(shown)


def _number(row: pd.Series) -> str:
    """This run's number of a claim: its value and its interval (over seeds, or the one its
    metric names); in how many seeds it holds is its verdict."""
    value = row["value"]
    if pd.isna(value):
        return "—"
    text = f"{value:.3g}"
    interval = row.get("ci95")
    named = INTERVAL.search(str(row.get("metric") or ""))
    if isinstance(interval, str) and interval.startswith("["):
        text += f" (95 % interval over seeds {interval})"
    elif named:
        text += f" (interval [{named[1]}])"
    return text


def _verdict(row: pd.Series) -> str:
    verdict = html.escape(row["verdict"])
    reason = row.get("reason")
    if row["outcome"] == UNTESTABLE and isinstance(reason, str) and reason:
        verdict += f": {html.escape(reason)}"
    return verdict


# The colour of each outcome, so that a glance finds what failed.
COLOURS = {HOLDS: "#e6f4e6", FAILS: "#fbe3e3", SOME: "#fdf3d8", INCONCLUSIVE: "#fdf3d8",
           UNTESTABLE: "#eeeeee", UNTESTED: "#ffffff"}


def landing_html(table: pd.DataFrame) -> str:
    """The findings as an HTML fragment for the report's first page: per group its counts and
    one row per claim and task (finding, what the paper states where the configuration names
    it, this run's number, verdict)."""
    table = grouped(table)
    parts = [f"<p><b>{html.escape(counts_line(counts(table)))}</b> "
             f"(claims of this run, one per task they were judged on).</p>"]
    for group, rows in table.groupby("group", sort=False):
        parts.append(f"<h3>{html.escape(group)}: {html.escape(counts_line(counts(rows)))}</h3>")
        parts.append("<table style='border-collapse: collapse'><tr><th>finding</th>"
                     "<th>task</th><th>this run</th><th>verdict</th></tr>")
        for stage, claims in rows.groupby("stage", sort=False):
            parts.append(f"<tr><td colspan='4'><i>{html.escape(STAGES.get(stage, stage))}"
                         f"</i> ({html.escape(stage)})</td></tr>")
            previous = None
            for _, row in claims.iterrows():
                finding = "" if row["claim"] == previous else html.escape(row["claim"])
                paper = row.get("paper")
                if finding and isinstance(paper, str):
                    finding += f"<br><small>paper: {html.escape(paper)}</small>"
                previous = row["claim"]
                task = row.get("task")
                parts.append(
                    f"<tr style='background: {COLOURS[row['outcome']]}'><td>{finding}</td>"
                    f"<td>{html.escape(task) if isinstance(task, str) else '—'}</td>"
                    f"<td>{html.escape(_number(row))}</td><td>{_verdict(row)}</td></tr>")
        parts.append("</table>")
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


def summary_lines(table: pd.DataFrame, report: str | os.PathLike) -> list[str]:
    """The few lines `make run` prints at its end: where the report is, how many claims hold,
    do not or cannot be tested, and which do not hold (by name, with their tasks)."""
    table = grouped(table)
    lines = [f"Report: {report}",
             f"Claims: {counts_line(counts(table))} (by paper and stage on the report's first "
             "page)"]
    short = {title: name for title, name, _ in GROUPS}
    failed = table[table["outcome"].isin([FAILS, SOME])]
    if len(failed):
        lines.append("Do not hold:")
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
