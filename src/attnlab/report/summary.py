"""The run's own pages of the `snakemake --report`: a run summary and the table of claims.

* Run summary: wall time and memory per stage (from Snakemake's `benchmark:` files), the device
  and dev accuracy of every fine-tuned model, the library and package versions, and the
  configuration with its defaults filled in.
* Claims: the claims tables of every stage (each a paper's statement judged on this run, see
  `attnlab.analyses.claims`), grouped by paper and stage as the report's first page groups them
  (`attnlab.report.findings`), with what the paper states beside each claim when the
  configuration names the paper (`report.papers`, files in workflow/report/findings/). A run
  over several seeds (config `seeds`) shows each claim once: its metric's mean and 95 %
  interval over the seeds, the value of every seed, and "holds in k of n seeds".

Both are HTML pages, which the report shows as they are.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from attnlab.analyses import verdicts
from attnlab.analyses.verdicts import UNTESTABLE, Bar, Interval
from attnlab.plumbing.outputs import provenance, write_table
from attnlab.report.findings import counts, counts_line, grouped, landing_html
from attnlab.report.html_pages import page, table_html, write_page

# A seed's outputs are in results/<name>/seed=<s>/ (config `seeds`).
SEED_FOLDER = re.compile(r"(?:^|/)seed=(\d+)/")
# Student's t, 0.975 quantile, by degrees of freedom: the half-width of a 95 % interval of a
# mean over n seeds is T_975[n - 1] * sd / sqrt(n). Beyond 30 the value for 30 (conservative).
T_975 = [math.nan, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074,
         2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def seed_of(path: str | os.PathLike) -> int | None:
    """The seed of an output of a replicated run (in a seed=<s> folder); None otherwise."""
    match = SEED_FOLDER.search(Path(path).as_posix())
    return int(match[1]) if match else None


def interval95(values: list[float]) -> tuple[float, float]:
    """The 95 % interval of the mean of `values` (Student's t; NaN for fewer than two)."""
    n = len(values)
    if n < 2:
        return math.nan, math.nan
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T_975[min(n - 1, len(T_975) - 1)] * sd / math.sqrt(n)
    return mean - half, mean + half


def _over_seeds_verdict(group: pd.DataFrame) -> tuple[str, float, float, float]:
    """A claim's verdict over seeds, its value and interval. A finding with intervals is judged
    by the verdict rules (`verdicts.over_seeds`: k of n and the pooled interval); a claim
    without them by "holds in k of n seeds", with the Student-t interval of its mean."""
    tested = group[group["verdict"] != UNTESTABLE]
    if len(tested) and tested["low"].notna().all() and tested["bar"].notna().any():
        bar = Bar(float(tested["bar"].iloc[0]), str(tested["side"].iloc[0]))
        judged = verdicts.over_seeds(
            [None if row.verdict == UNTESTABLE else
             Interval(row.value, row.low, row.high, int(row.n)) for row in group.itertuples()],
            bar)
        pooled = judged.interval
        return str(judged), pooled.estimate, pooled.low, pooled.high
    values = [float(v) for v in tested["value"] if not pd.isna(v)]
    low, high = interval95(values)
    verdict = (f"holds in {(tested['verdict'] == 'holds').sum()} of {len(tested)} seeds"
               if len(tested) else UNTESTABLE)
    if len(tested) and len(tested) < len(group):
        verdict += f" (not testable in {len(group) - len(tested)})"
    return verdict, sum(values) / len(values) if values else math.nan, low, high


def over_seeds(claims: pd.DataFrame) -> pd.DataFrame:
    """One row per claim of a claims table with a `seed` column: `value` the mean over the seeds
    whose verdict is not "not testable" (a finding's pooled estimate), `ci95` its 95 %
    interval, `per_seed` every seed's value and verdict (+ holds, - does not, ~ inconclusive,
    ? not testable), `verdict` over the seeds (`_over_seeds_verdict`), `reason` why a seed
    could not test it (the first seed's)."""
    marks = {"holds": "+", "does not hold": "-", "inconclusive": "~", "not testable": "?"}
    rows = []
    keys = ["stage", "task", "claim"]
    for key, group in claims.sort_values("seed").groupby(keys, dropna=False, sort=False):
        verdict, value, low, high = _over_seeds_verdict(group)
        rows.append({
            **dict(zip(keys, key, strict=True)),
            # a metric may name a count that differs between seeds (the examples it was judged
            # on): the first seed's words stand for all
            "metric": group["metric"].iloc[0],
            "value": value,
            "ci95": "—" if math.isnan(low) else f"[{low:.4g}, {high:.4g}]",
            "per_seed": ", ".join(f"{s}: {v:.4g} {marks[verdict]}" for s, v, verdict in
                                  zip(group["seed"], group["value"], group["verdict"],
                                      strict=True)),
            "verdict": verdict,
            "reason": next((r for r in group["reason"] if isinstance(r, str) and r), ""),
        })
    return pd.DataFrame(rows, columns=[*keys, "metric", "value", "ci95", "per_seed", "verdict",
                                       "reason"])


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
        {"task": Path(path).parent.name, "seed": seed_of(path),
         **{key: metrics.get(key) for key in (
             "device", "dev_accuracy", "epochs", "steps", "n_train", "n_dev", "seconds")}}
        for path in finetune_metrics for metrics in [json.loads(Path(path).read_text())]
    ])
    if models["seed"].isna().all():  # one run: its seed is in the configuration below
        models = models.drop(columns="seed")
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


def load_findings(paths: list[str | os.PathLike]) -> pd.DataFrame:
    """The stated findings of the papers in `paths` (YAML: `title`, `findings` with `stage`,
    `claim`, optional `task`, and `paper`, what the paper states)."""
    rows = []
    for path in paths:
        document = yaml.safe_load(Path(path).read_text())
        rows += [{"task": None, **finding, "source": document["title"]}
                 for finding in document["findings"]]
    return pd.DataFrame(rows, columns=["stage", "claim", "task", "paper", "source"])


def claims_table(
    claims_paths: list[str | os.PathLike],
    *,
    findings_paths: list[str | os.PathLike],
    out: str | os.PathLike,
    origin: dict[str, Any],
    landing: str | os.PathLike | None = None,
    table_out: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Gather every stage's claims into HTML tables at `out`, grouped by paper and stage, each
    beside what the papers in `findings_paths` state about it (a finding naming a task is about
    that task's row only), and the findings this run did not test. The claims of a run over
    several seeds (paths in seed=<s> folders) are aggregated over the seeds (over_seeds).
    Writes the report's first page's fragment at `landing` and the table it is built from at
    `table_out` (Parquet, with the provenance `origin`), where given. Returns the table."""
    claims, seeds = gathered_claims(claims_paths)
    table = beside_findings(claims, load_findings(findings_paths))
    replicated = ["ci95", "per_seed"] if seeds else []
    table = grouped(table[["stage", "task", "claim", "paper", "metric", "value", *replicated,
                           "verdict", "reason", "source"]])
    write_page(out, _claims_page(table, seeds, papers=bool(findings_paths), origin=origin))
    if landing is not None:
        write_page(landing, landing_html(table))
    if table_out is not None:
        write_table(table, table_out, origin)
    return table


def gathered_claims(claims_paths: list[str | os.PathLike]) -> tuple[pd.DataFrame, list[int]]:
    """Every stage's claims tables as one, and the seeds of the runs they come from (none for
    a one-seed run); the claims of several seeds are aggregated over them (over_seeds)."""
    claims = pd.concat([pd.read_parquet(path).assign(seed=seed_of(path))
                        for path in claims_paths], ignore_index=True)
    # (tables of an older run have no reason; those of stages not on the verdict rules yet, no
    # interval)
    for column in ("task", "reason", "low", "high", "n", "bar", "side"):
        if column not in claims:
            claims[column] = None
    claims["reason"] = claims["reason"].fillna("")
    seeds = sorted(set(claims["seed"].dropna().astype(int)))
    if seeds:
        return over_seeds(claims), seeds
    return claims[["stage", "task", "claim", "metric", "value", "verdict", "reason"]], seeds


def beside_findings(claims: pd.DataFrame, findings: pd.DataFrame) -> pd.DataFrame:
    """The claims, each with the paper and source of the finding stated about it, and after
    them the findings that no claim tests."""

    def about(finding: pd.Series, claim: pd.Series) -> bool:
        return (finding["stage"], finding["claim"]) == (claim["stage"], claim["claim"]) and (
            pd.isna(finding["task"]) or finding["task"] == claim["task"])

    stated = [[f for _, f in findings.iterrows() if about(f, c)] for _, c in claims.iterrows()]
    # a finding about one task is more precise than one about every task
    stated = [sorted(fs, key=lambda f: pd.isna(f["task"]))[:1] for fs in stated]
    claims = claims.assign(paper=[fs[0]["paper"] if fs else None for fs in stated],
                           source=[fs[0]["source"] if fs else None for fs in stated])
    untested = findings[[not any(about(f, c) for _, c in claims.iterrows())
                         for _, f in findings.iterrows()]]
    return pd.concat([claims, untested.assign(verdict="not tested by this run", reason="")],
                     ignore_index=True)


def _claims_page(table: pd.DataFrame, seeds: list[int], *, papers: bool,
                 origin: dict[str, Any]) -> str:
    """The claims page of the grouped `table`: a heading with the counts, one table per group
    (with the papers' statements where `papers`), and the provenance."""
    if seeds:
        heading = f"Every stage's claims over {len(seeds)} seeds ({', '.join(map(str, seeds))})"
        how = (" <i>value</i> is the mean over the seeds, <i>ci95</i> its 95 % interval "
               "(Student's t), <i>per_seed</i> each seed's value (+ holds, - does not, "
               "~ inconclusive, ? not testable).")
    else:
        heading, how = "Every stage's claims, judged on this run", ""
    shown = table.drop(columns=["group", "outcome"])
    if not papers:
        shown = shown.drop(columns=["paper", "source"])
    note = "; <i>paper</i> is what the paper states" if papers else ""
    sections = [(heading,
                 f"<p>{html.escape(counts_line(counts(table)))}. Each metric names the "
                 f"threshold of its verdict; <i>reason</i> says why a claim is not testable"
                 f"{note}.{how}</p>")]
    sections += [(group, table_html(shown[table["group"] == group]))
                 for group in table["group"].unique()]
    return page("Claims", [*sections, ("Provenance", _provenance(origin))])
