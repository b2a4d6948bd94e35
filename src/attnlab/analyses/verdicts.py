"""How a finding is judged (docs/methods.md, "How a finding is judged"): the one place the
verdict rules live; every stage's findings use them.

* A finding is a statistic over units (examples, heads, sentences) with a 95 % percentile
  bootstrap interval (`bootstrap`; `difference` for "A beats B", paired where A and B are
  measured on the same units, with Newcombe's interval where both are yes/no units; `share`
  for the share of yes/no units, a Wilson interval) and a `Bar` on a stated side.
* Its verdict (`verdict`) is one of VERDICTS: "holds" when the interval clears the bar on the
  stated side, "does not hold" when it lies wholly on the other side, "inconclusive" when it
  contains the bar, whatever the point estimate; "not testable" (with its reason) where the
  data or the configuration cannot test it (`attnlab.analyses.claims.NotTestable`), and where
  the data cannot tell the sides of a comparison apart though it has an interval
  (`untestable`): both sides at one bound of their scale on every unit (at the ceiling or the
  floor), or an interval of no width.
* A comparison ("A beats B", "X falls with depth") of a measure on a 0–1 scale (a share, a
  probability, an accuracy, a correlation) holds only by at least `ONE_POINT`, never by any
  margin above 0.
* Over seeds (`over_seeds`): each seed's verdict, "holds in k of n", a pooled interval (kept on
  the measure's scale, `Interval.scale`: a pooled share never passes 1), and the run's
  verdict: holds when it holds in at least ⌈0.8 n⌉ seeds and the pooled interval clears the
  bar; does not hold symmetrically; inconclusive otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np

# Quantiles from statistics and scipy.special, not scipy.stats: importing scipy.stats takes about
# a second, in every job that judges findings and in every parse of the Snakefile.
from scipy import special

HOLDS, FAILS, INCONCLUSIVE, UNTESTABLE = ("holds", "does not hold", "inconclusive",
                                          "not testable")
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, UNTESTABLE)
SIDES = ("above", "below")
LEVEL = 0.95
# 2000 resamples put the percentile interval's ends within about 0.1 standard errors of where
# infinitely many would (Efron & Tibshirani 1993, §19.3); a fixed seed makes a run's verdicts
# reproducible to the digit.
RESAMPLES = 2000
SEED = 0
# A finding holds over n seeds when it holds in at least ⌈SEED_SHARE · n⌉ of them (4 of 5).
SEED_SHARE = 0.8
# The least difference a comparison on a 0–1 scale must clear (our choice): one point, a gap
# a reader of the papers' curves and tables would see. Against a bar of 0, any difference
# whose interval excludes 0 holds, however small: on untrained models, deleting the edges one
# method ranks first moves the output by 1e-4 more than another's, with an interval of 1e-5.
ONE_POINT = 0.01
# A measure's scale (`Interval.scale`), the range its values lie in: none; a share, probability,
# accuracy or rate; a correlation, or a difference of two measures on the 0–1 scale.
UNBOUNDED = (-math.inf, math.inf)
UNIT = (0.0, 1.0)
SIGNED_UNIT = (-1.0, 1.0)
# Resampled values held in memory at once: bounds a bootstrap of many units (a chunk of the
# resamples at a time; the draws are the same in any chunking, as one generator makes them).
_CHUNK_VALUES = 2**22

Statistic = Callable[[np.ndarray], np.ndarray]


def mean(sample: np.ndarray) -> np.ndarray:
    """The default statistic: the mean over the units (axis 1 of a (resamples, units) array)."""
    return sample.mean(axis=1)


@dataclass(frozen=True)
class Bar:
    """What a finding's interval is judged against: it holds when the interval lies wholly
    `side` ("above" or "below") `value`."""

    value: float
    side: str = "above"

    def __post_init__(self) -> None:
        if self.side not in SIDES:
            raise ValueError(f"a bar's side is one of {SIDES}, not {self.side!r}")

    def __str__(self) -> str:
        return f"{'>' if self.side == 'above' else '<'} {self.value:g}"


@dataclass(frozen=True)
class Interval:
    """A statistic's estimate on all the units and its 95 % interval over `n` units. `scale`:
    the least and greatest value the measure can take (UNIT for a share), which the interval
    pooled over seeds keeps to (`pooled`)."""

    estimate: float
    low: float
    high: float
    n: int
    scale: tuple[float, float] = UNBOUNDED
    # why the data cannot test a finding on this interval (`difference`: both sides at one
    # bound of their scale on every unit); empty where they can (`untestable`)
    at_bound: str = ""


# The reasons `difference` gives a comparison whose two sides sit at one bound of their scale
# on every unit (`Interval.at_bound`), each followed by that bound.
CEILING, FLOOR = "at the ceiling", "at the floor"


def untestable(interval: Interval) -> str:
    """Why a finding with this interval cannot be judged (empty where it can): both sides of
    its comparison at the ceiling or the floor on every unit (`difference`), or an interval
    of no width, which every resample giving the same value makes (a certainty no finite
    number of units gives; a share's Wilson interval and Newcombe's for a difference of
    shares always have a width)."""
    if interval.at_bound:
        return interval.at_bound
    # to rounding: resamples of the same units in another order can differ in the last digit
    if math.isclose(interval.low, interval.high, rel_tol=1e-9, abs_tol=1e-12):
        return f"every resample of the units gives {interval.estimate:.4g}: no interval"
    return ""


def verdict(interval: Interval, bar: Bar) -> str:
    """HOLDS when the interval lies wholly on the bar's side, FAILS when it lies wholly on the
    other, INCONCLUSIVE when it contains the bar (an end on the bar counts as containing it)."""
    above, below = interval.low > bar.value, interval.high < bar.value
    if bar.side == "above":
        return HOLDS if above else FAILS if below else INCONCLUSIVE
    return HOLDS if below else FAILS if above else INCONCLUSIVE


def _draws(values: np.ndarray, statistic: Statistic, resamples: int,
           rng: np.random.Generator) -> np.ndarray:
    """`statistic` on `resamples` resamples of the units of `values`, a chunk at a time."""
    n = len(values)
    chunk = max(1, _CHUNK_VALUES // (n * max(1, values[0].size)))
    return np.concatenate([
        statistic(values[rng.integers(0, n, size=(min(chunk, resamples - start), n))])
        for start in range(0, resamples, chunk)])


def _interval(estimate: float, draws: np.ndarray, n: int, scale: tuple[float, float]
              ) -> Interval:
    tail = (1 - LEVEL) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return Interval(float(estimate), float(low), float(high), n, scale)


def bootstrap(
    values: np.ndarray,
    statistic: Statistic = mean,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    scale: tuple[float, float] = UNBOUNDED,
) -> Interval:
    """The percentile bootstrap interval (LEVEL) of `statistic` over the units of `values`
    (axis 0: one row per unit; further axes are what each unit carries, e.g. the two
    measurements of a paired comparison).

    `statistic` maps an array of resampled units, (resamples, units, ...), to one value per
    resample; on `values` itself (as one resample) it gives the estimate. `scale`: the range
    of the statistic's values (`Interval.scale`).
    """
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        raise ValueError("a bootstrap interval needs at least one unit")
    draws = _draws(values, statistic, resamples, np.random.default_rng(seed))
    return _interval(statistic(values[None])[0], draws, len(values), scale)


def wilson(p: float, n: int) -> Interval:
    """A share `p` of `n` units with its Wilson score interval (LEVEL), never of zero width:
    the percentile bootstrap of 20 hits in 20 units is [1, 1], a certainty that 20 units
    cannot give; Wilson's is [0.84, 1]."""
    if n < 1:
        raise ValueError("a share needs at least one unit")
    z = NormalDist().inv_cdf((1 + LEVEL) / 2)
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return Interval(p, float(max(0.0, centre - half)), float(min(1.0, centre + half)), n, UNIT)


def _is_hits(values: np.ndarray) -> bool:
    return bool(np.isin(values, (0.0, 1.0)).all())


def share(hits: np.ndarray) -> Interval:
    """The share of units that are hits (`hits`: one 0/1 or bool per unit) with its Wilson
    score interval (`wilson`)."""
    hits = np.asarray(hits, dtype=float)
    if len(hits) == 0:
        raise ValueError("a share needs at least one unit")
    if not _is_hits(hits):
        raise ValueError("a share's units are hits or misses (0 or 1)")
    return wilson(float(hits.mean()), len(hits))


def _paired_shares(a: np.ndarray, b: np.ndarray) -> Interval:
    """The share of hits in `a` minus that in `b` (one 0/1 each per unit, the same units) with
    Newcombe's hybrid score interval for paired data (Newcombe 1998, "Improved confidence
    intervals for the difference between binomial proportions based on paired data",
    Statistics in Medicine 17, method 10): each share's Wilson interval, combined square and
    add with the correlation of the two (Newcombe's: a positive cross term counts only beyond
    n / 2; 0 where a margin is empty). It never has zero width: the percentile bootstrap of a
    difference that is 0 on every unit is [0, 0], whatever the number of units."""
    n = len(a)
    both, only_a, only_b = (float(np.sum(x)) for x in (a * b, a * (1 - b), (1 - a) * b))
    neither = n - both - only_a - only_b
    first, second = wilson((both + only_a) / n, n), wilson((both + only_b) / n, n)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    cross = both * neither - only_a * only_b
    cross = cross - n / 2 if cross > n / 2 else min(cross, 0.0)
    phi = cross / math.sqrt(margins) if margins else 0.0
    p, q = first.estimate, second.estimate
    low = p - q - math.sqrt((p - first.low)**2 + (second.high - q)**2
                            - 2 * phi * (p - first.low) * (second.high - q))
    high = p - q + math.sqrt((q - second.low)**2 + (first.high - p)**2
                             - 2 * phi * (q - second.low) * (first.high - p))
    return Interval(p - q, max(-1.0, low), min(1.0, high), n, SIGNED_UNIT)


def _at_bound(a: np.ndarray, b: np.ndarray, sides: tuple[float, float]) -> str:
    """Where both sides of a comparison sit at one bound of their scale on every unit: which
    (`CEILING`, `FLOOR`); empty otherwise."""
    for bound, name in ((sides[1], CEILING), (sides[0], FLOOR)):
        if math.isfinite(bound) and (a == bound).all() and (b == bound).all():
            return f"{name} (every unit at {bound:g} on both sides)"
    return ""


def difference(
    a: np.ndarray,
    b: np.ndarray,
    *,
    paired: bool,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    scale: tuple[float, float] = UNBOUNDED,
    sides: tuple[float, float] | None = None,
) -> Interval:
    """The interval of mean(a) − mean(b). `paired`: a and b are measured on the same units, in
    the same order, and one resample draws the same units for both (the units' own variation,
    shared by a and b, cancels); where every value of both is 0 or 1 (hits), Newcombe's
    interval of two paired shares instead (`_paired_shares`). Otherwise each is resampled on
    its own (two groups of units, e.g. different task pairs). n is the units' number (paired)
    or the smaller group's. `scale`: the range of the difference (SIGNED_UNIT for two shares,
    `Interval.scale`). `sides`: the range of a's and b's own values (UNIT for shares and
    reciprocal ranks; None: UNIT where every value of both is 0 or 1, a hit's scale, and no
    bound otherwise); where both sit at one end of it on every unit, the data cannot tell
    them apart, and the interval says so (`Interval.at_bound`: at the ceiling or the floor)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    hits = _is_hits(a) and _is_hits(b)
    if paired:
        if a.shape != b.shape:
            raise ValueError(f"a paired comparison needs the same units: {a.shape} vs {b.shape}")
        interval = (_paired_shares(a, b) if hits and a.ndim == 1 and len(a) else
                    bootstrap(a - b, resamples=resamples, seed=seed, scale=scale))
    else:
        if not (len(a) and len(b)):
            raise ValueError("a bootstrap interval needs at least one unit")
        rng = np.random.default_rng(seed)
        draws = _draws(a, mean, resamples, rng) - _draws(b, mean, resamples, rng)
        interval = _interval(a.mean() - b.mean(), draws, min(len(a), len(b)), scale)
    if sides is None:
        sides = UNIT if hits else UNBOUNDED
    return replace(interval, at_bound=_at_bound(a, b, sides))


def seeds_needed(n: int) -> int:
    """In how many of n seeds a finding must hold (or fail) for the run's verdict: ⌈0.8 n⌉."""
    return math.ceil(SEED_SHARE * n - 1e-9)


def pooled(per_seed: Sequence[Interval]) -> Interval:
    """The pooled interval over seeds: the mean of the seeds' estimates with its Student-t
    interval (n − 1 degrees of freedom), clipped to the measure's scale where every seed's
    interval has the same one; one seed's own interval when there is one.

    The mean of values on a scale lies on it, and so does the mean they estimate: clipping
    keeps every value the t interval covers that the measure can take (five seeds' shares
    near 1 would otherwise pool to an interval reaching past 1, e.g. 0.975 [0.945, 1.01]).

    The seed is the unit of replication for what fine-tuning learned: the spread of the
    seeds' estimates holds both the training randomness and each seed's sampling noise over
    its units, so the t interval of their mean covers both. A bootstrap over seeds × units
    would need every seed's units where the verdict is pooled (the report reads only the
    claims rows), and with five seeds a bootstrap over seeds has only 126 distinct resamples.
    `n` is the number of seeds.
    """
    if len(per_seed) == 1:
        return replace(per_seed[0], n=1)
    estimates = np.array([i.estimate for i in per_seed])
    centre, n = float(estimates.mean()), len(estimates)
    t = special.stdtrit(n - 1, (1 + LEVEL) / 2)  # Student t's quantile
    half = t * estimates.std(ddof=1) / math.sqrt(n)
    scales = {i.scale for i in per_seed}
    scale = scales.pop() if len(scales) == 1 else UNBOUNDED
    low, high = np.clip([centre - half, centre + half], *scale)
    return Interval(centre, float(low), float(high), n, scale)


@dataclass(frozen=True)
class SeedVerdict:
    """A finding over seeds: each tested seed's verdict, the pooled interval and the run's
    verdict. `untested`: seeds where it was not testable (left out of n)."""

    per_seed: tuple[str, ...]
    interval: Interval | None
    verdict: str
    untested: int

    @property
    def k(self) -> int:
        return self.per_seed.count(HOLDS)

    @property
    def n(self) -> int:
        return len(self.per_seed)

    def __str__(self) -> str:
        if not self.per_seed:
            return UNTESTABLE
        words = f"{self.verdict}: holds in {self.k} of {self.n} seeds"
        return words + (f" (not testable in {self.untested})" if self.untested else "")


def over_seeds(per_seed: Sequence[Interval | None], bar: Bar) -> SeedVerdict:
    """The run's verdict of a finding judged on every seed (None, or an interval that is
    `untestable`: not testable on that seed).
    It holds when it holds in at least ⌈0.8 n⌉ of the n tested seeds and the pooled interval
    clears the bar; it does not hold when it fails in as many and the pooled interval lies on
    the other side; otherwise it is inconclusive."""
    tested = [i for i in per_seed if i is not None and not untestable(i)]
    untested = len(per_seed) - len(tested)
    if not tested:
        return SeedVerdict((), None, UNTESTABLE, untested)
    verdicts = tuple(verdict(i, bar) for i in tested)
    interval = pooled(tested)
    needed = seeds_needed(len(tested))
    pooled_verdict = verdict(interval, bar)
    run = INCONCLUSIVE
    for outcome in (HOLDS, FAILS):
        if verdicts.count(outcome) >= needed and pooled_verdict == outcome:
            run = outcome
    return SeedVerdict(verdicts, interval, run, untested)
