"""The report's own pages: wall time per stage, and every claim beside the paper's finding."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnlab.analyses import (
    adversarial_attention,
    attack,
    attention_permutation,
    attention_ranking,
    effective_attention,
    heads,
    pruning,
    task_correlation,
    token_identifiability,
    token_mixing,
    verdicts,
)
from attnlab.analyses import claims as claim_rows
from attnlab.analyses.claims import NotTestable, claim
from attnlab.analyses.verdicts import Bar, Interval
from attnlab.report import findings as landing
from attnlab.report.summary import claims_table, run_summary, stage_times

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK_HEADER = "\t".join(["s", "h:m:s", "max_rss", "max_vms", "max_uss", "max_pss", "io_in",
                              "io_out", "mean_load", "cpu_time"])


def write_benchmark(path: Path, seconds: float, rss: str) -> Path:
    """A benchmark file as Snakemake writes it (rss is "-" where it could not be measured)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{BENCHMARK_HEADER}\n{seconds}\t0:00:0{int(seconds)}\t{rss}\t1\t1\t1\t0\t0"
                    f"\t50.0\t{seconds}\n")
    return path


def test_stage_times_sum_and_bound_the_jobs_of_each_stage(tmp_path):
    times = stage_times({
        "attribute": [write_benchmark(tmp_path / "a0.tsv", 3.0, "120.5"),
                      write_benchmark(tmp_path / "a1.tsv", 5.0, "-")],
        "finetune": [write_benchmark(tmp_path / "f.tsv", 2.0, "300.0")],
    }).set_index("stage")
    assert times.loc["attribute", "jobs"] == 2
    assert times.loc["attribute", "wall_s_total"] == 8.0
    assert times.loc["attribute", "wall_s_longest_job"] == 5.0
    assert times.loc["attribute", "peak_memory_mb"] == 120.5
    assert times.loc["all stages", "wall_s_total"] == 10.0


def test_run_summary_page_holds_times_models_versions_and_config(tmp_path):
    metrics = tmp_path / "finetune" / "mnli" / "metrics.json"
    metrics.parent.mkdir(parents=True)
    metrics.write_text('{"device": "cpu (1 threads)", "dev_accuracy": 0.8125, "epochs": 3}')
    config = {"name": "paper", "finetune": {"learning_rate": 5e-5}}
    out = tmp_path / "run_summary.html"
    run_summary(config,
                benchmarks={"finetune": [write_benchmark(tmp_path / "f.tsv", 2.0, "300.0")]},
                finetune_metrics=[metrics], out=out)
    page = out.read_text()
    for expected in ("Run summary: paper", "finetune", "cpu (1 threads)", "0.8125",
                     "transformers", "learning_rate: 5.0e-05"):
        assert expected in page, expected


def write_claims(path: Path, rows: list[dict], task: str | None = None) -> Path:
    frame = pd.DataFrame([claim(**row) for row in rows])
    if task:
        frame.insert(0, "task", task)
    frame.to_parquet(path)
    return path


HALF = Bar(0.5)


def finding_row(stage: str, statement: str, interval: Interval, bar: Bar = HALF,
                key: str = "fig3_low_pruning") -> dict:
    return claim_rows.finding(stage, statement, "share", interval, bar,
                              claim_rows.source("hao2021", key))


def write_rows(path: Path, rows: list[dict], task: str | None = "t") -> Path:
    """A claims table as the stages write it (the task first, where it has one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = claim_rows.claims_frame(rows)
    if task:
        frame.insert(0, "task", task)
    frame.to_parquet(path)
    return path


def test_the_claims_page_shows_each_finding_s_interval_bar_verdict_and_source(tmp_path):
    """A one-seed run: every finding with its estimate, interval, n, bar, verdict and source;
    the checks in a section of their own, not counted; the statements of the papers named in
    report.papers that no finding cites, listed."""
    rows = [finding_row("per_layer", "low heads barely hurt", Interval(0.8, 0.7, 0.9, 120)),
            finding_row("per_layer", "high heads hurt most", Interval(0.52, 0.45, 0.6, 120),
                        key="fig3_high_pruning"),
            claim("per_layer", "the curves start at full accuracy", "difference", 0.0, True,
                  kind="check")]
    out = tmp_path / "claims.html"
    table = claims_table([write_rows(tmp_path / "claims.parquet", rows)], out=out,
                         origin={"code_version": "abc"}, papers=["hao2021"])
    assert list(table["verdict"]) == ["holds", "inconclusive", "holds"]
    assert landing.counts(table) == {"holds": 1, "does not hold": 0, "holds in some seeds": 0,
                                     "inconclusive": 1, "not testable": 0}
    page = out.read_text()
    assert "1 holds, 0 does not hold, 1 inconclusive" in page
    for column in ("estimate", "interval", "n", "bar", "verdict", "source"):
        assert f"<th>{column}</th>" in page, column
    assert "<td>[0.7, 0.9]</td>" in page and "<td>&gt; 0.5</td>" in page and "<td>120</td>" in page
    assert str(claim_rows.source("hao2021", "fig3_low_pruning")) in page
    checks = page.index("<h2>Checks (not counted as findings)</h2>")
    assert page.index("the curves start at full accuracy") > checks
    assert "1 checks: 1 holds" in page
    untested = page[page.index("<h2>Statements no finding of this run tests</h2>"):]
    assert claim_rows.paper("hao2021")["statements"]["fig4_taylor"]["statement"] in untested
    # a statement no run can test says why; the others, that this run leaves them out
    tree_edges = claim_rows.paper("hao2021")["statements"]["tree_edges"]
    assert tree_edges["statement"] in untested and tree_edges["untested"] in untested
    assert "no stage or task of this configuration tests it" in untested
    assert claim_rows.paper("hao2021")["statements"]["fig3_low_pruning"]["statement"] not in \
        untested
    assert "abc" in page


def test_each_finding_stands_beside_its_control_and_is_flagged_when_that_holds_too(tmp_path):
    """The untrained control's claims (control=untrained/) join the run's findings by stage,
    task and claim; a finding that holds on both is flagged; checks get no control."""
    run = [finding_row("global", "keeps most", Interval(0.8, 0.7, 0.9, 100)),
           finding_row("global", "beats random", Interval(0.3, 0.2, 0.4, 100), Bar(0.0)),
           claim("global", "all heads kept is the full model", "difference", 0.0, True,
                 kind="check")]
    control = [finding_row("global", "keeps most", Interval(0.75, 0.6, 0.9, 100)),
               finding_row("global", "beats random", Interval(0.0, -0.1, 0.1, 100), Bar(0.0)),
               claim("global", "all heads kept is the full model", "difference", 0.0, True,
                     kind="check")]
    results = tmp_path / "results" / "r"
    out = {"out": results / "claims.html", "landing": results / "landing.html"}
    table = claims_table(
        [write_rows(results / "heads" / "t" / "claims.parquet", run)],
        controls_paths=[write_rows(results / "control=untrained" / "heads" / "t" /
                                   "claims.parquet", control)], origin={}, **out)
    by_claim = table.set_index("claim")
    assert by_claim.loc["keeps most", "untrained_verdict"] == "holds"
    assert by_claim.loc["keeps most", "untrained_low"] == 0.6
    assert by_claim.loc["keeps most", "flag"] == "holds untrained too"
    assert by_claim.loc["beats random", "untrained_verdict"] == "inconclusive"
    assert by_claim.loc["beats random", "flag"] == ""
    assert pd.isna(by_claim.loc["all heads kept is the full model", "untrained_verdict"])
    assert len(landing.flagged(table)) == 1
    page = out["landing"].read_text()
    assert "1 hold on a control run too, flagged" in page
    assert "untrained: 0.75 [0.6, 0.9] holds" in page and "flag: holds untrained too" in page
    assert "<th>untrained</th>" in out["out"].read_text()
    lines = landing.summary_lines(table, "r.html")
    assert "Hold on a control run too (flagged): 1" in lines


def test_a_statement_judged_once_per_layer_keeps_a_row_per_layer_beside_its_control(tmp_path):
    """Rows of one statement (one per layer, told apart by their metric) pair with the same
    layer's row of the control and of every other seed, in the order the stage wrote them."""
    def layers(values: list[float]) -> list[dict]:
        return [finding_row("adversarial_attention", "very different attention, same output",
                            Interval(v, v - 0.05, v + 0.05, 20)) for v in values]

    results = tmp_path / "results" / "r"
    seeds = [write_rows(results / f"seed={seed}" / "c.parquet", layers([0.9, 0.1]))
             for seed in (0, 1)]
    table = claims_table(seeds, controls_paths=[
        write_rows(results / "control=untrained" / "c.parquet", layers([0.8, 0.2]))],
        out=tmp_path / "claims.html", origin={})
    assert list(table["value"]) == pytest.approx([0.9, 0.1])
    assert list(table["untrained_value"]) == pytest.approx([0.8, 0.2])
    assert list(table["flag"]) == ["holds untrained too", ""]


def test_claims_over_seeds_give_mean_interval_and_k_of_n(tmp_path):
    """A run over seeds (config `seeds`) writes each seed's claims under seed=<s>/: the page
    shows each claim once, its mean, 95 % interval and per-seed values, and "holds in k of n"."""
    values = {0: 0.9, 1: 0.7, 2: 0.8}
    paths = []
    for seed, value in values.items():
        folder = tmp_path / "results" / "rep" / f"seed={seed}"
        folder.mkdir(parents=True)
        paths.append(write_claims(folder / "claims.parquet", [
            {"stage": "trees", "statement": "joins", "metric": f"share of {seed + 10} (>= 0.75)",
             "value": value, "holds": value >= 0.75},
            {"stage": "trees", "statement": "long", "metric": "m", "value": float("nan"),
             "holds": NotTestable("no long sentence")}], task="t"))
    out = tmp_path / "claims.html"
    table = claims_table(paths, out=out, origin={}).set_index("claim")
    joins = table.loc["joins"]
    # mean 0.8, sd 0.1: half-width t(0.975, 2 df) * 0.1 / sqrt(3) = 4.303 * 0.0577 = 0.2484
    assert joins["value"] == pytest.approx(0.8)
    assert (joins["low"], joins["high"]) == pytest.approx((0.5516, 1.0484), abs=1e-4)
    assert joins["per_seed"] == "0: 0.9 +, 1: 0.7 -, 2: 0.8 +"
    assert joins["verdict"] == "holds in 2 of 3 seeds"
    # the seeds' metrics name their own counts: the first seed's words stand, and say so
    assert joins["metric"] == "share of 10 (>= 0.75) (seed 0's words; the seeds' differ)"
    assert table.loc["long", "metric"] == "m"  # the same words in every seed: as they are
    assert table.loc["long", "verdict"] == "not testable"
    assert table.loc["long", "reason"] == "no long sentence"
    page = out.read_text()
    assert "over 3 seeds (0, 1, 2)" in page and "<th>per_seed</th>" in page
    assert "<td>[0.552, 1.05]</td>" in page
    assert "0 holds, 0 does not hold, 1 holds in some seeds, 1 not testable" in page
    # make run's lines name a claim that holds in some seeds only, with its k of n
    assert landing.summary_lines(table.reset_index(), "r.html")[2:4] == [
        "Do not hold:", "  Hao et al. 2021 / trees: joins (t holds in 2 of 3 seeds)"]


def test_findings_over_seeds_are_judged_by_k_of_n_and_the_pooled_interval(tmp_path):
    """A finding with intervals (analyses.verdicts) over five seeds: it holds in 4 of them and
    the pooled interval of the five estimates clears the bar, so the run's verdict is holds;
    one seed's inconclusive verdict is shown as such."""
    bar = Bar(0.5)
    estimates = [0.8, 0.7, 0.75, 0.85, 0.6]
    paths = []
    for seed, estimate in enumerate(estimates):
        folder = tmp_path / "results" / "rep" / f"seed={seed}"
        folder.mkdir(parents=True)
        half = 0.2 if seed == 4 else 0.1  # seed 4's interval [0.4, 0.8] contains the bar
        row = claim_rows.finding("global", "keeps most", "retention above chance",
                                 Interval(estimate, estimate - half, estimate + half, 100), bar,
                                 claim_rows.Source("Hao et al. 2021", "Fig. 4", "keeps most"))
        claim_rows.claims_frame([row]).assign(task="t").to_parquet(folder / "claims.parquet")
        paths.append(folder / "claims.parquet")
    table = claims_table(paths, out=tmp_path / "claims.html", origin={})
    row = table.set_index("claim").loc["keeps most"]
    # pooled: mean 0.74, sd 0.0962, t(0.975, 4) = 2.776: 0.74 ± 0.1194, clear of 0.5
    assert row["verdict"] == "holds: holds in 4 of 5 seeds"
    assert row["value"] == pytest.approx(0.74)
    assert (row["low"], row["high"], row["n"]) == pytest.approx((0.6206, 0.8594, 5), abs=1e-4)
    assert row["per_seed"].endswith("4: 0.6 ~")
    assert landing.outcome(row["verdict"]) == "holds"


def test_a_stage_of_the_first_seed_only_says_so_and_why_over_seeds(tmp_path):
    """Over two seeds, a paper's finding is judged over both ("k of 2"); the interaction
    methods' finding, which only the first seed's run has (FIRST_SEED_ONLY), keeps that seed's
    estimate, interval and verdict, and says "first seed only" and why instead of "1 of 1"."""
    results = tmp_path / "results" / "r"
    paths = [write_rows(results / f"seed={seed}" / "heads.parquet", [finding_row(
        "per_layer", "low heads barely hurt", Interval(v, v - 0.1, v + 0.1, 120))])
        for seed, v in ((0, 0.8), (1, 0.9))]
    paths.append(write_rows(results / "seed=0" / "interaction.parquet", [finding_row(
        "interaction_methods", "attribution leads attention", Interval(0.7, 0.6, 0.8, 30))]))
    table = claims_table(paths, out=tmp_path / "claims.html", origin={}).set_index("claim")
    # (two seeds' t interval, t(0.975, 1 df) = 12.7, is too wide to decide)
    assert table.loc["low heads barely hurt", "verdict"] == "inconclusive: holds in 2 of 2 seeds"
    only = table.loc["attribution leads attention"]
    assert only["verdict"] == ("holds: first seed only: the comparison of methods beyond the "
                               "papers, run once to fit the five-seed budget; its intervals "
                               "are over sentences")
    # the seed's own interval over its 30 sentences, not a pooled one of a single seed
    assert (only["value"], only["low"], only["high"]) == pytest.approx((0.7, 0.6, 0.8))
    assert only["per_seed"] == "0: 0.7"
    assert landing.outcome(only["verdict"]) == "holds"
    page = (tmp_path / "claims.html").read_text()
    assert "first seed only" in page and "1 of 1" not in page


def test_a_share_pooled_over_seeds_stays_within_0_and_1_also_from_older_tables(tmp_path):
    """Five seeds' shares of 200 examples (0.93, 0.98, 1, 1, 0.965): their t interval is
    [0.9388, 1.0112]; the report rebuilds each seed's interval with its scale from the claims
    rows, so the pooled high is 1. Claims tables written before the rows carried the scale
    (no scale columns) still pool, without bounds, as they did."""
    def seeds(name: str, drop: list[str]) -> list[Path]:
        paths = []
        for seed, hits in enumerate([186, 196, 200, 200, 193]):
            share = verdicts.share(np.r_[np.ones(hits), np.zeros(200 - hits)])
            path = tmp_path / name / f"seed={seed}" / "claims.parquet"
            paths.append(write_rows(path, [finding_row("trees", "joins", share, Bar(0.9))]))
            pd.read_parquet(path).drop(columns=drop).to_parquet(path)
        return paths

    out = tmp_path / "claims.html"
    row = claims_table(seeds("now", []), out=out, origin={}).iloc[0]
    # seed 0's Wilson interval, [0.886, 0.958], contains the bar
    assert row["verdict"] == "holds: holds in 4 of 5 seeds"
    # to 4 digits: the t quantile (2.776) and the sd of the estimates are rounded by hand
    assert (row["value"], row["low"], row["n"]) == pytest.approx((0.975, 0.9388, 5), abs=1e-4)
    assert row["high"] == 1.0  # exact: the clip returns the bound itself
    assert "<td>[0.939, 1]</td>" in out.read_text()
    older = claims_table(seeds("older", ["scale_low", "scale_high"]), out=out,
                         origin={}).iloc[0]
    assert (older["low"], older["high"]) == pytest.approx((0.9388, 1.0112), abs=1e-4)
    assert older["verdict"] == row["verdict"]


def _three_papers(tmp_path: Path) -> list[Path]:
    """Claims of stages of three groups, written as the stages write them (out of order)."""
    mixing = [
        {"stage": "token_mixing", "statement": "neighbours contribute more", "metric": "m",
         "value": 0.2, "holds": True},
        {"stage": "token_mixing", "statement": "own input contributes less with depth",
         "metric": "m", "value": float("nan"),
         "holds": NotTestable("the model has fewer than two layers")}]
    pruning_ = [
        {"stage": "global", "statement": "keeping 10% keeps most", "metric": "ratio",
         "value": 0.43, "holds": False},
        {"stage": "per_layer", "statement": "low heads barely hurt", "metric": "drop",
         "value": 0.0, "holds": True}]
    methods = [{"stage": "interaction_methods", "statement": "AttAttr beats attention",
                "metric": "hit: attattr minus attention", "value": 0.15, "holds": True},
               {"stage": "interaction_methods", "statement": "the scores are finite",
                "metric": "share finite", "value": 0.9, "holds": False, "kind": "check"}]
    cross = [{"stage": "task_correlation", "statement": "similar tasks correlate strongly",
              "metric": "r", "value": 0.12,
              "holds": NotTestable("synthetic tasks share no words")}]
    return [write_claims(tmp_path / "mixing.parquet", mixing, task="a"),
            write_claims(tmp_path / "methods.parquet", methods, task="a"),
            *(write_claims(tmp_path / f"heads_{t}.parquet", pruning_, task=t) for t in "ab"),
            write_claims(tmp_path / "cross.parquet", cross)]


def test_the_first_page_groups_the_claims_by_paper_and_stage(tmp_path):
    out = {"out": tmp_path / "claims.html", "landing": tmp_path / "landing.html",
           "table_out": tmp_path / "findings.parquet"}
    claims_table(_three_papers(tmp_path), origin={"code_version": "abc"}, **out)
    table = pd.read_parquet(out["table_out"])
    # Hao et al. first (its stages in the paper's order, a stage's tasks side by side), then
    # Brunner et al., then the interaction methods
    assert list(zip(table["stage"], table["task"].fillna(""), strict=True)) == [
        ("per_layer", "a"), ("per_layer", "b"), ("global", "a"), ("global", "b"),
        ("task_correlation", ""), ("token_mixing", "a"), ("token_mixing", "a"),
        ("interaction_methods", "a"), ("interaction_methods", "a")]
    assert table["group"].unique().tolist() == [landing.GROUPS[0][0], landing.GROUPS[1][0],
                                                landing.GROUPS[3][0]]
    assert landing.counts(table) == {"holds": 4, "does not hold": 2, "holds in some seeds": 0,
                                     "inconclusive": 0, "not testable": 2}
    page = out["landing"].read_text()
    assert "<b>4 holds, 2 does not hold, 2 not testable</b>" in page
    # each group with its own counts, in the order above
    headings = [page.index(f"<h3>{title}:") for title, _, _ in landing.GROUPS if title in
                set(table["group"])]
    assert headings == sorted(headings)
    assert f"<h3>{landing.GROUPS[0][0]}: 2 holds, 2 does not hold, 1 not testable</h3>" in page
    # a claim that cannot be tested says why, and keeps its number
    assert "not testable: synthetic tasks share no words" in page
    assert "<td>0.12</td>" in page
    # the claims page holds the same groups, each a table, with the reasons
    claims_page = out["out"].read_text()
    assert all(f"<h2>{group}</h2>" in claims_page for group in table["group"].unique())
    assert "the model has fewer than two layers" in claims_page


def test_make_run_prints_where_the_report_is_and_what_failed(tmp_path, capsys):
    results = tmp_path / "results" / "run"
    (results / "report").mkdir(parents=True)
    claims_table(_three_papers(tmp_path), origin={}, out=results / "report" / "claims.html",
                 table_out=results / landing.FINDINGS_TABLE)
    assert landing.main([str(results), "results/run/report.html"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Report: results/run/report.html",
        "Findings: 4 holds, 2 does not hold, 2 not testable (by paper and stage on the "
        "report's first page)",
        "Do not hold:",
        "  Hao et al. 2021 / global: keeping 10% keeps most (a, b)",
        "Checks, not counted as findings: 1 checks: 1 does not hold",
        "Checks that fail:",
        "  Interaction methods / interaction_methods: the scores are finite (a)"]
    # before rule claims has run: one line, no traceback
    assert landing.main([str(tmp_path / "results" / "other")]) == 1
    assert "findings.parquet is missing" in capsys.readouterr().err


def test_the_counts_say_how_many_findings_sit_at_a_ceiling_or_floor(tmp_path):
    """A comparison whose sides are at the ceiling on every unit is not testable, counted
    apart among the not testable ones, and shown on both pages with its interval and reason;
    over seeds, a seed at the ceiling is one that could not test it."""
    ceiling = verdicts.difference(np.ones(40), np.ones(40), paired=True,
                                  scale=verdicts.SIGNED_UNIT, sides=verdicts.UNIT)
    rows = [finding_row("per_layer", "low heads barely hurt", Interval(0.8, 0.7, 0.9, 120)),
            finding_row("per_layer", "high heads hurt most", ceiling, Bar(0.01)),
            finding_row("per_layer", "random heads hurt least", NotTestable("one head"))]
    out = {"out": tmp_path / "claims.html", "landing": tmp_path / "landing.html"}
    table = claims_table([write_rows(tmp_path / "claims.parquet", rows)], origin={}, **out)
    line = "1 holds, 0 does not hold, 2 not testable (1 at a ceiling or floor)"
    assert landing.findings_line(landing.grouped(table)) == line
    assert f"<b>{line}</b>" in out["landing"].read_text()
    reason = "at the ceiling (every unit at 1 on both sides)"
    for page in (out["landing"].read_text(), out["out"].read_text()):
        assert reason in page
        assert landing.interval_text(ceiling.low, ceiling.high) in page  # [-0.0876, 0.0876]
    seeds = [write_rows(tmp_path / f"seed={s}" / "claims.parquet", [finding_row(
        "per_layer", "high heads hurt most",
        ceiling if s == 0 else Interval(0.1, 0.05, 0.15, 40), Bar(0.01))]) for s in range(5)]
    pooled = claims_table(seeds, origin={}, out=tmp_path / "seeds.html").iloc[0]
    assert pooled["verdict"] == "holds: holds in 4 of 4 seeds (not testable in 1)"


def test_an_unknown_verdict_is_an_error():
    with pytest.raises(ValueError, match="unknown verdict 'maybe'"):
        landing.outcome("maybe")


# The paper configuration's model, BERT-base: 64 value dimensions per head, 12 layers.
BERT_BASE_D_V, BERT_BASE_LAYERS = 64, 12


def library_claims(tasks: list[str], similar: list[list[str]], dissimilar: list[list[str]]):
    """Every (stage, claim) the library states on a run of `tasks` with BERT-base, from made-up
    tables of every stage that judges claims."""
    half = np.tile([1.0, 0.0], (5, 50))  # every curve at accuracy 0.5 on 100 examples
    per_layer = pruning.Curves(pd.DataFrame(), {(*r, o): half for r, o in itertools.product(
        pruning.RANKINGS, pruning.ORDERS)})
    percents = list(range(0, 101, 10))
    global_ = pruning.Curves(pd.DataFrame(), {(m,): np.tile([1.0, 0.0], (11, 50))
                                              for m in heads.METHODS})
    importance = pd.DataFrame(np.random.default_rng(0).random((16, len(tasks))), columns=tasks)
    layers = range(BERT_BASE_LAYERS + 1)
    drops = pd.DataFrame({"trigger": [0.4, 0.2], "random": [0.1, 0.0]})
    per_head = pd.DataFrame([{"example": n, "length": n, "max_change": 0.0,
                              "null_dim": max(0, n - BERT_BASE_D_V), "repeated_values": 0,
                              "singular_ratio": 0.1,
                              "relative_change": 0.0 if n <= BERT_BASE_D_V else 0.3,
                              "pearson_r": 1 - n / 1000, "negative_share": 0.1}
                             for n in (10, 100, 120)])
    mass = pd.DataFrame([{"example": 100, "length": 100, "category": "[SEP]", "effective": 0.1,
                          "raw": 0.3}])
    sentences = pd.DataFrame([{"map": m, "loss": loss, "layer": layer, "sentence": 0,
                               "identified": 9, "tokens": 10}
                              for m in token_identifiability.MAPS
                              for loss in token_identifiability.LOSSES for layer in layers])
    tokens = pd.DataFrame([{"example": 0, "layer": layer, "top_is_self": True,
                            "self_contribution": 0.5, "neighbour_contribution": 0.2,
                            "distant_contribution": 0.1} for layer in layers])
    permuted = pd.DataFrame([{"permuted": name, "example": 0, "correct_share": 0.8,
                              "original_correct": True, "tvd_median": 0.1}
                             for name in [*map(str, layers), attention_permutation.ALL_LAYERS]])
    ranking = pd.DataFrame([{"example": 0, "tokens": 5, "tau_gradient": 0.1, "tau_loo": 0.2,
                             "tau_gradient_loo": 0.3}])
    keys = pd.DataFrame([{"example": 0, "same_prediction": True, "key_distance": 1.0,
                          "jsd": 0.2}])
    adversarial = pd.DataFrame([{"layer": layer, "jsd": 0.2} for layer in layers])
    labels = torch.tensor([0, 1] * 50)
    claims = (pruning.per_layer_claims(per_layer)
              + pruning.global_claims(global_, percents, labels)
              + task_correlation.cross_task_claims(importance, similar, dissimilar)
              + attack.attack_claims(drops, None, top=3)
              + effective_attention.claims(per_head, mass, BERT_BASE_D_V)
              + token_identifiability.claims(sentences) + token_mixing.claims(tokens)
              + attention_permutation.claims(permuted)
              + attention_ranking.claims(ranking, gradient=attention_ranking.DETACHED)
              + adversarial_attention.claims(keys, adversarial, epsilon=0.01,
                                             distance_cap=1.0))
    return {(c["stage"], c["claim"]) for c in claims}


def test_every_stage_the_library_judges_has_its_group_on_the_first_page():
    stated = library_claims(["mnli", "rte", "sst2"], [["mnli", "rte"]], [["mnli", "sst2"]])
    # and every stage an analysis module names as its own (STAGE = "..."), so that a new one
    # is not missed here
    declared = {match for path in (ROOT / "src" / "attnlab" / "analyses").glob("*.py")
                for match in re.findall(r'^STAGE = "(\w+)"', path.read_text(), re.M)}
    stages = {stage for stage, _ in stated} | declared | {"ground_truth", "trees", "triggers",
                                                          "interaction_methods"}
    # every stage that judges claims (induction and induction_heads: next-token tasks;
    # per_layer_label: this project's own)
    assert len(stages) == 18
    assert {stage: landing.group_of(stage) for stage in stages if
            landing.group_of(stage) == landing.OTHER or stage not in landing.STAGES} == {}



def test_make_run_ends_with_the_findings_lines_whether_or_not_the_report_was_rebuilt():
    # `make -n` prints the recipe without running it: after the report step (which rebuilds the
    # report or says it is up to date) comes the summary of the configuration's own results
    result = subprocess.run(["make", "-n", "--no-print-directory", "run",
                             "CONFIG=config/replicate.yaml"], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    lines = result.stdout.strip().splitlines()
    assert "Report up to date: results/replicate/report.html" in lines[-3]
    assert lines[-2].endswith("--report results/replicate/report.html; fi")
    assert lines[-1].endswith("python -m attnlab.report.findings results/replicate "
                              "results/replicate/report.html")
