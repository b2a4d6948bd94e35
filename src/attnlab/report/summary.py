"""The run's own pages of the `snakemake --report`: a run summary and the table of claims.

* Run summary: wall time and memory per stage (from Snakemake's `benchmark:` files), the device
  and dev accuracy of every fine-tuned model (the controls' included), the library and package
  versions, and the configuration with its defaults filled in.
* Claims: the claims tables of every stage (`attnlab.analyses.claims`). The findings, grouped by
  paper and stage as the report's first page groups them (`attnlab.report.findings`), each with
  its estimate, interval, n, bar, verdict and source, and beside it the same finding on each
  control run (config `controls`: the untrained model); the checks in a section of their own;
  the statements of the papers named in `report.papers` that no finding of this run tests. A
  run over several seeds (config `seeds`) shows each claim once, judged over the seeds
  (`verdicts.over_seeds`), with the value and verdict of every seed.

Both are HTML pages, which the report shows as they are.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from attnlab.analyses import claims as claim_rows
from attnlab.analyses import verdicts
from attnlab.analyses.verdicts import HOLDS, UNTESTABLE, Bar, Interval
from attnlab.plumbing.outputs import provenance, write_table
from attnlab.report.findings import (
    bar_text,
    checks_line,
    control_names,
    control_text,
    findings_line,
    findings_only,
    grouped,
    interval_text,
    landing_html,
    outcome,
)
from attnlab.report.html_pages import page, table_html, write_page

# A seed's outputs are in results/<name>/seed=<s>/ (config `seeds`), a control run's in
# results/<name>/control=<control>/ (config `controls`).
SEED_FOLDER = re.compile(r"(?:^|/)seed=(\d+)/")
CONTROL_FOLDER = re.compile(r"(?:^|/)control=(\w+)/")
# What makes a claim the same claim in another seed's or a control's tables: its stage, task
# and statement, and which of the rows of that statement it is (`occurrence`: a statement
# judged once per layer has a row per layer, in the same order in every run).
KEYS = ["stage", "task", "claim", "occurrence"]
# The columns of a gathered claims table (`attnlab.analyses.claims.COLUMNS` with the task and
# the occurrence); over seeds `value`, `low`, `high` are the pooled estimate and interval, `n`
# the seeds, and `per_seed` holds each seed's value and verdict.
TABLE = [*KEYS, "kind", "metric", "value", "low", "high", "n", "bar", "side", "verdict",
         "reason", "source"]
# A control's columns, each prefixed by the control's name (untrained_value, ...).
CONTROL_COLUMNS = ("value", "low", "high", "verdict")
FLAG = "flag"
# The stages beyond the papers and the example views, which a run over several seeds runs in its
# first seed only (the workflow's FIRST_SEED_RULES), and why: their claims over seeds are that
# seed's, and say so.
FIRST_SEED_ONLY = {
    "interaction_methods": "the comparison of methods beyond the papers, run once to fit the "
                           "five-seed budget; its intervals are over sentences",
    "quadrature_study": "a measurement of the integration rules against a converged reference, "
                        "with no finding for the seeds' spread to bear on",
    "example_views": "pages to read examples by, with no finding, which show the interaction "
                     "methods' scores of the first seed's models",
}


def seed_of(path: str | os.PathLike) -> int | None:
    """The seed of an output of a replicated run (in a seed=<s> folder); None otherwise."""
    match = SEED_FOLDER.search(Path(path).as_posix())
    return int(match[1]) if match else None


def control_of(path: str | os.PathLike) -> str | None:
    """The control of an output of a control run (in a control=<control> folder); None for the
    run itself."""
    match = CONTROL_FOLDER.search(Path(path).as_posix())
    return match[1] if match else None


def _scale(row: Any) -> tuple[float, float]:
    """A seed's row's scale (`verdicts.Interval.scale`); none where the row has none, as in
    the claims tables of code from before the claims recorded it."""
    low, high = getattr(row, "scale_low", math.nan), getattr(row, "scale_high", math.nan)
    return (-math.inf if pd.isna(low) else float(low),
            math.inf if pd.isna(high) else float(high))


def _over_seeds_verdict(group: pd.DataFrame) -> tuple[str, Interval | None]:
    """A claim's verdict over seeds and its pooled interval. A finding with intervals is judged
    by the verdict rules (`verdicts.over_seeds`: k of n and the pooled interval, kept on the
    measure's scale); a claim without them (a check, or a finding of a stage not yet on the
    verdict rules) by "holds in k of n seeds", with the pooled interval of its estimates."""
    tested = group[group["verdict"] != UNTESTABLE]
    if not len(tested):
        return UNTESTABLE, None
    if tested["low"].notna().all() and tested["bar"].notna().any():
        bar = Bar(float(tested["bar"].iloc[0]), str(tested["side"].iloc[0]))
        judged = verdicts.over_seeds(
            [None if row.verdict == UNTESTABLE else
             Interval(row.value, row.low, row.high, int(row.n), _scale(row))
             for row in group.itertuples()],
            bar)
        return str(judged), judged.interval
    held = int((tested["verdict"] == HOLDS).sum())
    verdict = f"holds in {held} of {len(tested)} seeds"
    if len(tested) < len(group):
        verdict += f" (not testable in {len(group) - len(tested)})"
    return verdict, verdicts.pooled([Interval(v, math.nan, math.nan, 1) for v in tested["value"]])


def over_seeds(claims: pd.DataFrame) -> pd.DataFrame:
    """One row per claim of a claims table with a `seed` column: `value`, `low`, `high` its
    pooled estimate and interval over the seeds whose verdict is not "not testable", `n` the
    seeds, `per_seed` every seed's value and verdict (+ holds, - does not, ~ inconclusive,
    ? not testable), `verdict` over the seeds (`_over_seeds_verdict`), `reason` why a seed
    could not test it (the first seed's). A claim of a stage run in the first seed only
    (FIRST_SEED_ONLY) keeps that seed's value, interval and verdict, which says so and why."""
    marks = {"holds": "+", "does not hold": "-", "inconclusive": "~", "not testable": "?"}
    rows = []
    for key, group in claims.sort_values("seed", kind="stable").groupby(KEYS, dropna=False,
                                                                       sort=False):
        first = group.iloc[0]
        if first["stage"] in FIRST_SEED_ONLY:
            rows.append({**first[TABLE].to_dict(), "n": 1,
                         "per_seed": f"{first['seed']}: {first['value']:.4g}",
                         "verdict": f"{first['verdict']}: first seed only: "
                                    f"{FIRST_SEED_ONLY[first['stage']]}"})
            continue
        verdict, pooled = _over_seeds_verdict(group)
        metric = first["metric"]
        if group["metric"].nunique() > 1:
            # a metric may name what differs between seeds (the examples it was judged on, the
            # leading method): the first seed's words stand for all, and say so
            metric += f" (seed {first['seed']}'s words; the seeds' differ)"
        rows.append({
            **first[TABLE].to_dict(), **dict(zip(KEYS, key, strict=True)), "metric": metric,
            "value": pooled.estimate if pooled else math.nan,
            "low": pooled.low if pooled else math.nan,
            "high": pooled.high if pooled else math.nan,
            "n": pooled.n if pooled else 0,
            "per_seed": ", ".join(f"{s}: {v:.4g} {marks[verdict]}" for s, v, verdict in
                                  zip(group["seed"], group["value"], group["verdict"],
                                      strict=True)),
            "verdict": verdict,
            "reason": next((r for r in group["reason"] if r), ""),
        })
    return pd.DataFrame(rows, columns=[*TABLE, "per_seed"])


def _provenance(origin: dict[str, Any]) -> str:
    return f"<pre>{html.escape(json.dumps(origin, indent=2, sort_keys=True, default=str))}</pre>"


def stage_times(benchmarks: dict[str, list[str | os.PathLike]]) -> pd.DataFrame:
    """Per stage (rule): jobs, summed and longest wall time (s), largest peak memory (MB).

    `benchmarks` maps each rule to the `benchmark:` files of its jobs (Snakemake's TSV: `s`
    is the wall time in seconds, `max_rss` the peak resident memory in MB).
    """
    rows = []
    for rule, paths in benchmarks.items():
        runs = pd.concat([pd.read_csv(path, sep="\t") for path in paths])
        rows.append({"stage": rule, "jobs": len(paths), "wall_s_total": runs["s"].sum(),
                     "wall_s_longest_job": runs["s"].max(),
                     "peak_memory_mb": pd.to_numeric(runs["max_rss"], errors="coerce").max()})
    table = pd.DataFrame(rows, columns=["stage", "jobs", "wall_s_total", "wall_s_longest_job",
                                        "peak_memory_mb"])
    total = {"stage": "all stages", "jobs": table["jobs"].sum(),
             "wall_s_total": table["wall_s_total"].sum()}
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


def run_summary(
    config: dict[str, Any],
    *,
    benchmarks: dict[str, list[str | os.PathLike]],
    finetune_metrics: list[str | os.PathLike],
    out: str | os.PathLike,
) -> None:
    """Write the run summary page at `out`: times per stage, fine-tuned models, versions and
    the configuration."""
    models = pd.DataFrame([
        {"task": Path(path).parent.name, "seed": seed_of(path), "control": control_of(path),
         **{key: metrics.get(key) for key in (
             "device", "dev_accuracy", "epochs", "steps", "n_train", "n_dev", "seconds")}}
        for path in finetune_metrics for metrics in [json.loads(Path(path).read_text())]
    ])
    # one run: its seed is in the configuration below; no control runs
    models = models.drop(columns=[c for c in ("seed", "control") if models[c].isna().all()])
    origin = provenance()
    versions = pd.DataFrame(
        [{"component": "attnlab code version", "version": origin["code_version"]},
         {"component": "python", "version": origin["python"]},
         *({"component": name, "version": version}
           for name, version in origin["packages"].items())])
    times = stage_times(benchmarks)
    sections = [
        ("Wall time per stage",
         "<p>Summed over the stage's jobs, which may have run in parallel; from the "
         "<code>benchmark:</code> files in <code>benchmarks/</code>.</p>" + table_html(times)),
        ("Fine-tuned models (device, dev accuracy)", table_html(models)),
        ("Versions", table_html(versions)),
        ("Configuration (defaults filled in)",
         f"<pre>{html.escape(yaml.safe_dump(config, sort_keys=False))}</pre>"),
    ]
    write_page(out, page(f"Run summary: {config['name']}", sections))


def read_claims(paths: list[str | os.PathLike]) -> pd.DataFrame:
    """The claims tables at `paths` as one, in TABLE's columns and a `seed` (None: a one-seed
    run). Tables of older runs lack some columns: their claims are findings without an
    interval, bar or source."""
    claims = pd.concat([pd.read_parquet(path).assign(seed=seed_of(path)) for path in paths],
                       ignore_index=True)
    for column in TABLE:
        if column not in claims:
            claims[column] = None
    claims["occurrence"] = claims.groupby(["seed", "stage", "task", "claim"], dropna=False,
                                          sort=False).cumcount()
    return claims.fillna({"kind": "finding", "reason": "", "source": "", "side": ""})


def gathered_claims(claims_paths: list[str | os.PathLike]) -> tuple[pd.DataFrame, list[int]]:
    """Every stage's claims tables as one, and the seeds of the runs they come from (none for
    a one-seed run); the claims of several seeds are judged over them (over_seeds)."""
    claims = read_claims(claims_paths)
    seeds = sorted(set(claims["seed"].dropna().astype(int)))
    if seeds:
        return over_seeds(claims), seeds
    return claims[TABLE], seeds


def with_controls(table: pd.DataFrame,
                  controls: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The gathered claims with, for every finding, the same finding (KEYS) of each control
    run (`controls`: its claims tables by the control's name) in columns <control>_value,
    _low, _high, _verdict, and `flag` naming the controls on which a finding that holds holds
    too: what it states the model learned is there without the learning. Checks get none."""
    flags = pd.Series("", index=table.index)
    for name, control in controls.items():
        found = findings_only(control)[[*KEYS, *CONTROL_COLUMNS]]
        found = found.rename(columns={c: f"{name}_{c}" for c in CONTROL_COLUMNS})
        table = table.merge(found, on=KEYS, how="left")
        also = (table["verdict"].map(outcome) == HOLDS) & (table[f"{name}_verdict"] == HOLDS)
        flags = flags.where(~also, flags + f"holds {name} too; ")
    return table.assign(**{FLAG: flags.str.removesuffix("; ")})


def untested_statements(table: pd.DataFrame, papers: list[str]) -> pd.DataFrame:
    """The statements of `papers` (their files in attnlab/analyses/papers/) that no finding of
    `table` cites as its source, each with why: the statement's own reason where no run can
    test it, else what this run leaves out."""
    cited = set(table["source"])
    rows = [{"paper": claim_rows.paper(name)["cite"], "where": entry["where"],
             "statement": entry["statement"],
             "why": entry.get("untested", "no stage or task of this configuration tests it")}
            for name in papers for key, entry in claim_rows.paper(name)["statements"].items()
            if str(claim_rows.source(name, key)) not in cited]
    return pd.DataFrame(rows, columns=["paper", "where", "statement", "why"])


def claims_table(
    claims_paths: list[str | os.PathLike],
    *,
    out: str | os.PathLike,
    origin: dict[str, Any],
    controls_paths: Sequence[str | os.PathLike] = (),
    papers: Sequence[str] = (),
    landing: str | os.PathLike | None = None,
    table_out: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Gather every stage's claims into the claims page at `out`: the findings grouped by paper
    and stage, each beside the same finding of the control runs whose claims tables are
    `controls_paths` (in control=<control> folders), the checks apart, and the statements of
    `papers` no finding tests. The claims of a run over several seeds (paths in seed=<s>
    folders) are judged over the seeds (over_seeds). Writes the report's first page's fragment
    at `landing` and the table it is built from at `table_out` (Parquet, with the provenance
    `origin`), where given. Returns the table."""
    claims, seeds = gathered_claims(claims_paths)
    by_control: dict[str, list] = {}
    for path in controls_paths:
        by_control.setdefault(control_of(path), []).append(path)
    table = grouped(with_controls(claims, {name: read_claims(paths)[TABLE]
                                           for name, paths in by_control.items()}))
    untested = untested_statements(table, list(papers))
    write_page(out, _claims_page(table, seeds, untested=untested, origin=origin))
    if landing is not None:
        write_page(landing, landing_html(table))
    if table_out is not None:
        write_table(table, table_out, origin)
    return table


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The grouped table as the claims page shows it: each claim's estimate, interval, n, bar
    and verdict, its source, its number and verdict on each control (with the flag), and over
    seeds each seed's value."""
    out = table[["stage", "task", "claim", "metric"]].assign(
        estimate=table["value"],
        interval=[interval_text(lo, hi) for lo, hi in zip(table["low"], table["high"],
                                                          strict=True)],
        n=table["n"],
        bar=[bar_text(v, s) for v, s in zip(table["bar"], table["side"], strict=True)],
        verdict=table["verdict"], reason=table["reason"], source=table["source"])
    if "per_seed" in table:
        out["per_seed"] = table["per_seed"]
    for name in control_names(table):
        out[name] = [control_text(row, name) for _, row in table.iterrows()]
    if control_names(table):
        out[FLAG] = table[FLAG]
    return out


def _claims_page(table: pd.DataFrame, seeds: list[int], *, untested: pd.DataFrame,
                 origin: dict[str, Any]) -> str:
    """The claims page of the grouped `table`: a heading with the findings' counts, one table
    of findings per group, the checks, the untested statements, and the provenance."""
    if seeds:
        heading = f"Every stage's findings over {len(seeds)} seeds ({', '.join(map(str, seeds))})"
        how = (" Over seeds, <i>estimate</i> and <i>interval</i> are pooled over the seeds "
               "(n: the seeds), <i>per_seed</i> each seed's value (+ holds, - does not, "
               "~ inconclusive, ? not testable).")
    else:
        heading, how = "Every stage's findings, judged on this run", ""
    findings, checks = findings_only(table), table[table["kind"] == "check"]
    sections = [(heading,
                 f"<p>{html.escape(findings_line(table))}. A finding holds when its 95 % "
                 "interval lies wholly on the bar's side, does not hold when it lies wholly on "
                 "the other, and is inconclusive when it contains the bar; <i>reason</i> says "
                 "why a finding is not testable; a control column holds the same finding on "
                 "that control run, and <i>flag</i> marks a finding that holds there too."
                 f"{how}</p>")]
    sections += [(group, table_html(shown(findings[findings["group"] == group])))
                 for group in findings["group"].unique()]
    sections.append(("Checks (not counted as findings)",
                     f"<p>{html.escape(checks_line(table))}: what follows from the "
                     "mathematics or the construction, a detector of bugs.</p>"
                     + table_html(shown(checks).drop(columns=["source"]))))
    if len(untested):
        sections.append(("Statements no finding of this run tests", table_html(untested)))
    return page("Claims", [*sections, ("Provenance", _provenance(origin))])
