"""The verdict rules on constructed values: the four verdicts, bootstrap intervals (coverage,
determinism, paired against unpaired), k of n over seeds, and the claim rows they fill."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from attnlab.analyses import verdicts
from attnlab.analyses.claims import (
    COLUMNS,
    NotTestable,
    Source,
    claim,
    claims_frame,
    finding,
    on_models,
    source,
    unlearned,
)
from attnlab.analyses.verdicts import Bar, Interval

SOURCE = Source("Hao et al. 2021", "Fig. 3", "a constructed statement")


@pytest.mark.parametrize("low, high, side, expected", [
    (0.2, 0.4, "above", "holds"),
    (-0.4, -0.2, "above", "does not hold"),
    (-0.1, 0.3, "above", "inconclusive"),
    (0.0, 0.3, "above", "inconclusive"),  # an end on the bar: the interval contains it
    (-0.4, -0.2, "below", "holds"),
    (0.2, 0.4, "below", "does not hold"),
    (-0.1, 0.3, "below", "inconclusive"),
])
def test_a_verdict_follows_from_where_the_interval_lies_against_the_bar(low, high, side,
                                                                        expected):
    # the estimate (0.25, inside every interval above 0 or not) never decides
    assert verdicts.verdict(Interval(0.25, low, high, 10), Bar(0.0, side)) == expected


def test_a_finding_row_has_its_interval_bar_source_and_one_of_the_four_verdicts():
    rows = [finding("s", "holds", "m", Interval(0.5, 0.2, 0.8, 40), Bar(0.1), SOURCE),
            finding("s", "fails", "m", Interval(-0.5, -0.8, -0.2, 40), Bar(0.1), SOURCE),
            finding("s", "unsure", "m", Interval(0.5, 0.05, 0.8, 40), Bar(0.1), SOURCE),
            finding("s", "untested", "m", NotTestable("no long sequence"), Bar(0.1), SOURCE)]
    table = claims_frame(rows)
    assert list(table.columns) == COLUMNS
    assert table["verdict"].tolist() == ["holds", "does not hold", "inconclusive",
                                         "not testable"]
    assert set(table["verdict"]) == set(verdicts.VERDICTS)
    assert table["reason"].tolist() == ["", "", "", "no long sequence"]
    assert (table["kind"] == "finding").all() and (table["bar"] == 0.1).all()
    assert table["source"].iloc[0] == "Hao et al. 2021, Fig. 3: a constructed statement"
    assert math.isnan(table["value"].iloc[3]) and table["n"].iloc[0] == 40
    # a row of a stage not yet converted keeps its call, with no interval
    old = claim("s", "old", "m", 0.3, True)
    assert old["verdict"] == "holds" and math.isnan(old["low"]) and old["source"] == ""
    assert claim("s", "c", "m", 1.0, True, kind="check")["kind"] == "check"
    with pytest.raises(ValueError, match="kind is one of"):
        claim("s", "c", "m", 1.0, True, kind="guess")


def test_a_finding_row_records_its_measure_s_scale():
    """The scale travels in the row (the report pools the seeds' rows): a share's is 0 to 1, a
    measure without bounds -inf to inf; a row without an interval has NaN."""
    table = claims_frame([
        finding("s", "share", "m", verdicts.share(np.ones(20)), Bar(0.5), SOURCE),
        finding("s", "mean", "m", Interval(0.5, 0.2, 0.8, 40), Bar(0.1), SOURCE),
        finding("s", "untested", "m", NotTestable("no long sequence"), Bar(0.1), SOURCE),
        claim("s", "a check", "m", 1.0, True, kind="check")]).set_index("claim")
    scales = list(zip(table["scale_low"], table["scale_high"], strict=True))
    assert scales[:2] == [(0.0, 1.0), (-math.inf, math.inf)]
    assert table.loc[["untested", "a check"], ["scale_low", "scale_high"]].isna().all(axis=None)


def test_the_bootstrap_interval_covers_a_known_mean_and_is_deterministic():
    rng = np.random.default_rng(1)
    values = rng.normal(2.0, 1.0, 400)
    interval = verdicts.bootstrap(values)
    assert interval.n == 400 and interval.estimate == pytest.approx(values.mean())
    assert interval.low < 2.0 < interval.high
    # its width is about the normal interval's, 2 · 1.96 · sd / sqrt(n) (10 % for the
    # resampling noise of 2000 resamples)
    assert interval.high - interval.low == pytest.approx(2 * 1.96 * values.std() / 20, rel=0.1)
    assert verdicts.bootstrap(values) == interval
    assert verdicts.bootstrap(values, seed=1) != interval
    # resampled in chunks (many units) or at once, the draws are the same
    small_chunks = verdicts._CHUNK_VALUES
    try:
        verdicts._CHUNK_VALUES = 4000  # 10 resamples of 400 units per chunk
        assert verdicts.bootstrap(values) == interval
    finally:
        verdicts._CHUNK_VALUES = small_chunks


def test_a_statistic_of_several_measurements_per_unit():
    # a ratio of two means over the same units: both columns resampled together
    values = np.column_stack([np.full(50, 3.0), np.full(50, 2.0)])
    ratio = verdicts.bootstrap(values, lambda s: s[..., 0].mean(1) / s[..., 1].mean(1))
    assert (ratio.estimate, ratio.low, ratio.high) == pytest.approx((1.5, 1.5, 1.5))


def test_a_paired_interval_excludes_zero_where_the_unpaired_one_does_not():
    # the units differ much (sd 1), A is B plus a gain of 0.1 ± 0.01 on every unit: paired,
    # the interval is that of the gains' mean, about ± 2·0.01/√60 = ± 0.003; unpaired, the
    # spread of the units swamps the gain
    rng = np.random.default_rng(2)
    b = rng.normal(0.0, 1.0, 60)
    a = b + rng.normal(0.1, 0.01, 60)
    paired = verdicts.difference(a, b, paired=True)
    unpaired = verdicts.difference(a, b, paired=False)
    assert paired.estimate == pytest.approx(unpaired.estimate) == pytest.approx(0.1, abs=0.005)
    assert 0.09 < paired.low < paired.high < 0.11
    assert unpaired.low < 0 < unpaired.high
    assert verdicts.verdict(paired, Bar(0.0)) == "holds"
    assert verdicts.verdict(unpaired, Bar(0.0)) == "inconclusive"
    with pytest.raises(ValueError, match="the same units"):
        verdicts.difference(a, b[:-1], paired=True)


def _seed(estimate: float, half: float = 0.05) -> Interval:
    return Interval(estimate, estimate - half, estimate + half, 100)


def test_over_seeds_a_finding_holds_in_at_least_four_of_five_with_a_clearing_pooled_interval():
    bar = Bar(0.0)
    assert verdicts.seeds_needed(5) == 4 and verdicts.seeds_needed(10) == 8
    assert verdicts.seeds_needed(1) == 1 and verdicts.seeds_needed(3) == 3
    four = verdicts.over_seeds([_seed(0.3), _seed(0.25), _seed(0.35), _seed(0.3), _seed(0.02)],
                               bar)
    assert four.per_seed == ("holds",) * 4 + ("inconclusive",)
    assert (four.k, four.n, four.verdict) == (4, 5, "holds")
    assert four.interval.low > 0 and str(four) == "holds: holds in 4 of 5 seeds"
    # the pooled interval: the seeds' mean with Student's t (2.776 at 4 degrees of freedom)
    estimates = np.array([0.3, 0.25, 0.35, 0.3, 0.02])
    half = 2.776 * estimates.std(ddof=1) / math.sqrt(5)
    assert four.interval.high - four.interval.estimate == pytest.approx(half, rel=1e-3)

    three = verdicts.over_seeds([_seed(0.3), _seed(0.3), _seed(0.3), _seed(0.0), _seed(0.0)],
                                bar)
    assert (three.k, three.verdict) == (3, "inconclusive")
    failing = verdicts.over_seeds([_seed(-0.3)] * 4 + [_seed(0.3)], bar)
    assert failing.verdict == "inconclusive"  # fails in 4, but the pooled interval holds 0
    assert verdicts.over_seeds([_seed(-0.3)] * 5, bar).verdict == "does not hold"
    # five seeds that all hold, but whose estimates scatter across the bar, do not pool
    scattered = [Interval(e, e - 0.001, e + 0.001, 100) for e in (0.01, 0.02, 0.9, 0.01, 0.01)]
    spread = verdicts.over_seeds(scattered, bar)
    assert spread.k == 5 and spread.interval.low < 0 and spread.verdict == "inconclusive"
    # seeds that cannot test it are left out of n; none left: not testable
    partly = verdicts.over_seeds([_seed(0.3), None, _seed(0.3)], bar)
    assert (partly.n, partly.untested, partly.verdict) == (2, 1, "holds")
    assert str(partly) == "holds: holds in 2 of 2 seeds (not testable in 1)"
    assert verdicts.over_seeds([None, None], bar).verdict == "not testable"
    # one seed: its own interval
    assert verdicts.over_seeds([_seed(0.3)], bar).interval == Interval(0.3, 0.25, 0.35, 1)


def _shares(hits: list[int], units: int = 200) -> list[Interval]:
    """Each seed's share of `units` with its Wilson interval (scale 0–1)."""
    return [verdicts.share(np.r_[np.ones(k), np.zeros(units - k)]) for k in hits]


def test_the_pooled_interval_of_shares_stays_within_0_and_1():
    """Five seeds' shares 0.93, 0.98, 1, 1, 0.965 (of 200 examples each): mean 0.975, sd
    0.02915, so the t interval is 0.975 ± 2.776 · 0.02915 / √5 = [0.9388, 1.0112], past 1. A
    share cannot pass 1: the pooled high is 1 and the low stays where it was."""
    seeds = _shares([186, 196, 200, 200, 193])
    assert {s.scale for s in seeds} == {verdicts.UNIT}
    shares = verdicts.pooled(seeds)
    assert (shares.estimate, shares.n, shares.scale) == (pytest.approx(0.975), 5, verdicts.UNIT)
    assert shares.high == 1.0  # exact: the clip returns the bound itself
    # to 4 digits: the hand computation's t quantile (2.776) and sd are rounded
    assert shares.low == pytest.approx(0.9388, abs=1e-4)
    # the same estimates on a measure without bounds: the t interval as it is, past 1
    plain = verdicts.pooled([Interval(s.estimate, s.low, s.high, s.n) for s in seeds])
    assert (plain.low, plain.high) == pytest.approx((0.9388, 1.0112), abs=1e-4)
    assert plain.low == shares.low and plain.scale == verdicts.UNBOUNDED
    # seeds of different scales (tables of older code among them) are not clipped
    mixed = verdicts.pooled([*seeds[:4], Interval(0.965, 0.93, 0.98, 200)])
    assert mixed.high == plain.high
    # a difference of two shares keeps to [-1, 1] at both ends
    gaps = [Interval(e, e - 0.01, e + 0.01, 50, verdicts.SIGNED_UNIT) for e in (-0.99, -1, -0.9)]
    assert verdicts.pooled(gaps).low == -1.0
    # one seed: its own interval, with its scale
    assert verdicts.pooled(seeds[:1]) == Interval(0.93, seeds[0].low, seeds[0].high, 1,
                                                  verdicts.UNIT)


def test_every_paper_file_names_its_statements_and_an_unknown_key_is_refused():
    from attnlab.analyses.claims import PAPERS, paper, source

    names = sorted(path.stem for path in PAPERS.glob("*.yaml"))
    assert "hao2021" in names
    for name in names:
        entries = paper(name)
        assert entries["title"] and entries["cite"]
        assert isinstance(entries["learned"], bool), name
        for key, entry in entries["statements"].items():
            # `untested`: why no run can test it; `bar`: where its findings' bar comes from
            # (tests/test_bars.py)
            assert {"where", "statement"} <= set(entry) <= {"where", "statement", "untested",
                                                            "bar"}, (name, key)
            assert str(source(name, key)) == (f"{entries['cite']}, {entry['where']}: "
                                              f"{entry['statement']}")
    with pytest.raises(KeyError, match="no statement 'fig99'"):
        source("hao2021", "fig99")
    with pytest.raises(KeyError, match="no statements file for paper 'nobody'"):
        source("nobody", "fig3_low_pruning")


@pytest.mark.parametrize("accuracy, n, chance, learned", [
    (1.0, 200, 0.5, True),
    (0.6, 400, 0.5, True),  # 240 of 400: the interval, about [0.55, 0.65], clears 0.5
    (0.515, 200, 0.5, False),  # the untrained syn_rte model: [0.445, 0.585] contains chance
    (0.6, 20, 0.5, False),  # 12 of 20: too few examples to tell from chance
    (0.35, 200, 0.36, False),  # below the majority class
    (0.62, 300, 0.6, False),  # above 1/2 but not above an unbalanced split's majority class
])
def test_a_model_learned_its_task_when_its_dev_accuracy_interval_lies_above_chance(
        accuracy, n, chance, learned):
    why = unlearned({"dev_accuracy": accuracy, "n_dev": n, "dev_chance": chance})
    assert (why is None) == learned
    if not learned:
        assert why.reason.startswith(f"the model did not learn its task: dev accuracy "
                                     f"{accuracy:.3g} [") and f"chance ({chance:.3g}" in why.reason


def test_findings_about_learning_are_not_testable_on_a_model_that_learned_nothing():
    interval = Interval(0.02, 0.01, 0.03, 50)
    rows = claims_frame([
        finding("s", "learned and holding", "m", interval, Bar(0),
                source("hao2021", "fig3_low_pruning")),
        finding("s", "about the architecture", "m", interval, Bar(0),
                source("brunner2020", "depth")),
        finding("s", "learned and already untestable", "m", NotTestable("one layer"), Bar(0),
                source("jain2019", "gradients")),
        claim("s", "a check", "m", 1.0, True, kind="check"),
    ])
    assert rows["learned"].tolist() == [True, False, True, False]
    chance = {"dev_accuracy": 0.47, "n_dev": 200, "dev_chance": 0.5}
    trained = {"dev_accuracy": 1.0, "n_dev": 200, "dev_chance": 0.5}
    pd.testing.assert_frame_equal(on_models(rows, {"syn_sst2": trained}), rows)
    judged = on_models(rows, {"syn_sst2": chance}).set_index("claim")
    first = judged.loc["learned and holding"]
    assert first["verdict"] == "not testable"
    assert first["reason"].startswith("the model did not learn its task: dev accuracy 0.47")
    # the estimate and interval stay, shown but not judged
    assert (first["value"], first["low"], first["high"]) == (0.02, 0.01, 0.03)
    assert judged.loc["about the architecture", "verdict"] == "holds"
    assert judged.loc["learned and already untestable", "reason"] == "one layer"
    assert judged.loc["a check", "verdict"] == "holds"
    # a finding its data could not judge (both sides at the ceiling on every unit) says first
    # that the model learned nothing, and keeps its estimate and interval
    ceiling = claims_frame([finding("s", "at the ceiling", "m",
                                    verdicts.difference(np.ones(20), np.ones(20), paired=True),
                                    Bar(0), source("hao2021", "fig3_low_pruning"))])
    assert ceiling.loc[0, "verdict"] == "not testable"
    assert ceiling.loc[0, "reason"].startswith("at the ceiling")
    unlearned = on_models(ceiling, {"syn_sst2": chance}).loc[0]
    assert unlearned["verdict"] == "not testable"
    assert unlearned["reason"].startswith("the model did not learn its task")
    assert (unlearned["value"], unlearned["low"], unlearned["high"]) == (
        ceiling.loc[0, "value"], ceiling.loc[0, "low"], ceiling.loc[0, "high"])
    # findings over several tasks' models name the task that did not learn
    both = on_models(rows, {"syn_mnli": trained, "syn_sst2": chance})
    assert both.loc[0, "reason"].startswith("syn_sst2: the model did not learn its task")


def test_a_comparison_clears_one_point_not_zero():
    """An untrained model's edges move its output by 1e-4: an interval of such differences
    excludes 0, and holds against a bar of 0 but not against one point."""
    tiny = Interval(2.2e-4, 2.0e-4, 2.4e-4, 200)
    assert verdicts.verdict(tiny, Bar(0)) == "holds"
    assert verdicts.verdict(tiny, Bar(verdicts.ONE_POINT)) == "does not hold"
    assert verdicts.verdict(Interval(0.05, 0.02, 0.08, 200), Bar(verdicts.ONE_POINT)) == "holds"


def test_a_share_of_hits_has_the_wilson_interval_not_a_degenerate_bootstrap():
    """20 hits of 20: the bootstrap's interval is [1, 1]; Wilson's (z = 1.96) [0.839, 1], so
    a bar of 0.9 is not cleared by 20 examples. 12 of 20: the textbook [0.387, 0.781]."""
    assert verdicts.bootstrap(np.ones(20)) == Interval(1.0, 1.0, 1.0, 20)
    all_hits = verdicts.share(np.ones(20, bool))
    assert (all_hits.estimate, all_hits.high, all_hits.n) == (1.0, 1.0, 20)
    assert all_hits.low == pytest.approx(20 / (20 + 1.959964**2))
    assert verdicts.verdict(all_hits, Bar(0.9)) == "inconclusive"
    some = verdicts.share(np.r_[np.ones(12), np.zeros(8)])
    assert (some.low, some.high) == pytest.approx((0.3866, 0.7812), abs=1e-4)
    with pytest.raises(ValueError, match="hits or misses"):
        verdicts.share(np.array([0.5, 1.0]))


def _hits(*counts: int) -> tuple[np.ndarray, np.ndarray]:
    """Paired hits from the counts of units that are hits on both sides, on a alone, on b
    alone and on neither."""
    kinds = np.repeat(np.arange(4), counts)
    return (np.isin(kinds, (0, 1)).astype(float), np.isin(kinds, (0, 2)).astype(float))


def test_a_paired_difference_of_hits_has_newcombe_s_interval():
    """Newcombe's (1998) hybrid score interval for paired shares, on the worked example of
    Fagerland, Lydersen & Laake (2017, Statistical Analysis of Contingency Tables, ch. 8;
    Cavo et al. 2012): 59 units hit on both sides, 6 on a alone, 16 on b alone, 80 on neither;
    -0.0621 [-0.1186, -0.0046], to the 4 decimals printed. `difference` chooses it for paired
    hits, by itself."""
    a, b = _hits(59, 6, 16, 80)
    newcombe = verdicts.difference(a, b, paired=True)
    assert (newcombe.estimate, newcombe.low, newcombe.high) == pytest.approx(
        (-0.0621, -0.1186, -0.0046), abs=1e-4)
    assert (newcombe.n, newcombe.scale) == (161, verdicts.SIGNED_UNIT)
    # values that are not all 0 or 1 keep the paired bootstrap (its scale the caller's)
    assert verdicts.difference(a * 0.5, b, paired=True).scale == verdicts.UNBOUNDED


@pytest.mark.parametrize("n", [1, 7, 200])
def test_a_share_and_a_difference_of_shares_always_have_a_width(n):
    """Where every resample gives the same value (all hits, no hits, or both sides alike on
    every unit), a bootstrap's interval has no width; Wilson's and Newcombe's always have
    one, narrower as the units grow: the certainty of n units is never complete."""
    for hits in (np.ones(n), np.zeros(n)):
        interval = verdicts.share(hits)
        assert interval.low < interval.high
    widths = []
    for counts in ((n, 0, 0, 0), (0, 0, 0, n), (n - n // 2, 0, 0, n // 2), (0, n, 0, 0)):
        interval = verdicts.difference(*_hits(*counts), paired=True)
        assert -1 <= interval.low < interval.high <= 1
        widths.append(interval.high - interval.low)
    # 200 units alike on both sides: about ± 0.019 (one side's Wilson reach, z²/(n + z²))
    if n == 200:
        assert widths[0] == pytest.approx(2 * 1.96**2 / (200 + 1.96**2), rel=0.01)


def test_a_comparison_whose_sides_sit_at_one_bound_on_every_unit_is_at_the_ceiling_or_floor():
    """Both sides at 1 (or 0) of their scale on every unit: the data cannot tell them apart,
    whatever the interval; one unit off the bound on either side, they can. Hits are on 0 to 1
    by themselves; a measure stated to have no bound (`sides` unbounded) is never at one."""
    ones, zeros = np.ones(30), np.zeros(30)
    ceiling = verdicts.difference(ones, ones, paired=True, sides=verdicts.UNIT)
    assert ceiling.at_bound == "at the ceiling (every unit at 1 on both sides)"
    assert ceiling.estimate == 0 and ceiling.low < 0 < ceiling.high  # Newcombe's, shown
    floor = verdicts.difference(zeros, zeros, paired=False, sides=verdicts.UNIT)
    assert floor.at_bound == "at the floor (every unit at 0 on both sides)"
    assert verdicts.difference(ones, ones, paired=True).at_bound == ceiling.at_bound
    assert verdicts.difference(ones, ones, paired=True, sides=verdicts.UNBOUNDED).at_bound == ""
    off = ones.copy()
    off[3] = 0.5
    assert verdicts.difference(off, ones, paired=True, sides=verdicts.UNIT).at_bound == ""
    assert verdicts.difference(ones, zeros, paired=True, sides=verdicts.UNIT).at_bound == ""
    # a measure of 0 to 5, at 5 on every unit on both sides: a bootstrap of no width, and the
    # reason it is not testable is the ceiling
    top = verdicts.difference(np.full(30, 5.0), np.full(30, 5.0), paired=True, sides=(0, 5))
    assert (top.low, top.high) == (0, 0)
    assert verdicts.untestable(top) == "at the ceiling (every unit at 5 on both sides)"


def test_a_finding_at_the_ceiling_or_of_no_width_is_not_testable_with_its_interval_shown():
    """A finding whose interval cannot judge it is "not testable" with the reason, and keeps
    its estimate, interval, units and scale (a finding the data cannot test at all has NaN).
    An interval of no width is never judged: a safety net for a bootstrap every resample of
    which gives the same value."""
    bar = Bar(verdicts.ONE_POINT)
    ceiling = finding("s", "A beats B", "hit", verdicts.difference(
        np.ones(73), np.ones(73), paired=True, scale=verdicts.SIGNED_UNIT,
        sides=verdicts.UNIT), bar, SOURCE)
    assert (ceiling["verdict"], ceiling["reason"]) == (
        "not testable", "at the ceiling (every unit at 1 on both sides)")
    assert (ceiling["value"], ceiling["n"], ceiling["scale_low"]) == (0, 73, -1)
    assert ceiling["low"] == pytest.approx(-ceiling["high"]) and ceiling["high"] > 0.03
    flat = finding("s", "A beats B", "gain", Interval(0.3, 0.3, 0.3, 40), bar, SOURCE)
    assert (flat["verdict"], flat["reason"]) == (
        "not testable", "every resample of the units gives 0.3: no interval")
    assert (flat["value"], flat["low"], flat["high"], flat["n"]) == (0.3, 0.3, 0.3, 40)
    rounded = finding("s", "A beats B", "gain", Interval(0.3, 0.3, 0.3 + 1e-16, 40), bar, SOURCE)
    assert rounded["verdict"] == "not testable"  # a width of rounding is none
    judged = finding("s", "A beats B", "gain", Interval(0.3, 0.29, 0.31, 40), bar, SOURCE)
    assert (judged["verdict"], judged["reason"]) == ("holds", "")
    # over seeds, a seed at the ceiling is one where the finding was not testable
    seeds = verdicts.over_seeds([_seed(0.3)] * 4 + [verdicts.difference(
        np.ones(9), np.ones(9), paired=True, sides=verdicts.UNIT)], bar)
    assert (seeds.verdict, seeds.n, seeds.untested) == ("holds", 4, 1)
