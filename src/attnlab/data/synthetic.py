"""Synthetic text classification tasks with planted token-pair interactions.

Stand-ins for MNLI (`pair3`), RTE (`pair2`) and SST-2 (`single2`) on which we know which
tokens decide the label, so attribution methods can be checked against the truth.

The rule ("a match decides"): a kind has pair types (a_k, b_k). Every class but the last owns
`types_per_class` of them; `decoys` more belong to no class. The first segment holds the
a-words of `halves` distinct types and the second the b-words of `halves` distinct types, with
at most one type present on both sides (the match). The label is the class of the match, and
the last class when there is no match or the match is a decoy. So an a-word without its b-word
says nothing; only a pair decides. `single2` puts all the words in one sentence.

A segment alone does narrow the label down (a class none of whose a-words is present cannot
be the label): a linear bag-of-words model of one pair3 segment is right 56–59 % of the time
(of both segments 71 %), as MNLI's hypothesis alone predicts about half of its labels. A single
word moves P(label) by at most 0.18 (`tests/test_synthetic.py` bounds it). Without that weak
hint the tiny default models learn the rule late or not at all; with it they learn it by
looking from a-words to b-words (README: How often attribution finds the planted pair).

Over-confident triggers: each class c has a trigger pair (t_c, u_c). With probability
`trigger_rate` an example also gets the trigger pair of a class other than the one the rule
gives, and that class overrides the rule; with the same probability it gets one word of a
random trigger pair instead, which changes nothing. Unlike a planted pair's words, a trigger
word alone predicts its class (P = 0.83 with two classes, 0.78 with three), as real triggers
such as "no" or "never" do; trigger examples therefore hold no ground-truth pair.

Every word is lowercase letters and digits (one token in a word-level vocabulary), and each
kind has its own words.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from attnlab.plumbing.preflight import SYNTHETIC_SHAPES

SYNTHETIC_KINDS = tuple(SYNTHETIC_SHAPES)
N_FILLERS = 40
# Above 1 / (types_per_class + 1): each class's trigger pair is then its most frequent pair.
TRIGGER_RATE = 0.25


@dataclass(frozen=True)
class _Kind:
    prefix: str  # first letter of every word of the kind, so kinds never share words
    classes: int
    segments: int
    min_words: int  # words per segment, inclusive range
    max_words: int
    halves: int = 3  # a-words (and b-words) per example
    types_per_class: int = 5
    decoys: int = 5  # pair types of no class: their match leaves the label at the last class

    @property
    def pair_types(self) -> int:
        return (self.classes - 1) * self.types_per_class + self.decoys


_KINDS = {
    # short segments: with more filler words the tiny default model finds the pairs much
    # later, at a point that varies from seed to seed
    # more pair types per class than the 2-class kinds: with 5, one pair type of syn_mnli's
    # entailment class was mined more often than the class's trigger pair (README)
    "pair3": _Kind("m", **vars(SYNTHETIC_SHAPES["pair3"]), min_words=4, max_words=8,
                   types_per_class=8),
    "pair2": _Kind("r", **vars(SYNTHETIC_SHAPES["pair2"]), min_words=4, max_words=8),
    "single2": _Kind("s", **vars(SYNTHETIC_SHAPES["single2"]), min_words=8, max_words=14),
}


def _kind(kind: str) -> _Kind:
    if kind not in _KINDS:
        raise ValueError(f"synthetic kind {kind!r} is not one of {', '.join(SYNTHETIC_KINDS)}")
    return _KINDS[kind]


def num_classes(kind: str) -> int:
    """Number of classes of a kind."""
    return _kind(kind).classes


def planted_pairs(kind: str) -> list[tuple[str, str]]:
    """The pair types (a_k, b_k), k = 0..K-1; see `pair_class`."""
    spec = _kind(kind)
    return [(f"{spec.prefix}a{k}", f"{spec.prefix}b{k}") for k in range(spec.pair_types)]


def pair_class(kind: str, k: int) -> int:
    """The label a match of pair type k gives: its class, the last class for a decoy."""
    spec = _kind(kind)
    return min(k // spec.types_per_class, spec.classes - 1)


def trigger_pairs(kind: str) -> dict[int, tuple[str, str]]:
    """The trigger pair (t_c, u_c) of each class c."""
    spec = _kind(kind)
    return {c: (f"{spec.prefix}t{c}", f"{spec.prefix}u{c}") for c in range(spec.classes)}


@cache
def _fillers(kind: str) -> np.ndarray:
    # an array, built once: rng.choice would convert a list on every draw (most of the time
    # generating an example took)
    return np.array([f"{_kind(kind).prefix}w{i}" for i in range(N_FILLERS)])


def vocabulary() -> list[str]:
    """Every word any kind can emit, sorted."""
    words = set()
    for kind in SYNTHETIC_KINDS:
        words.update(w for pair in planted_pairs(kind) for w in pair)
        words.update(w for pair in trigger_pairs(kind).values() for w in pair)
        words.update(map(str, _fillers(kind)))
    return sorted(words)


def _place(rng: np.random.Generator, segment: list[str], words: list[str]) -> list[int]:
    """Overwrite distinct random positions of `segment` with `words`; return the positions."""
    positions = rng.choice(len(segment), size=len(words), replace=False)
    for position, word in zip(positions, words, strict=True):
        segment[position] = word
    return [int(p) for p in positions]


def _draw(rng: np.random.Generator, candidates: list[int], n: int) -> list[int]:
    return [int(t) for t in rng.choice(candidates, size=n, replace=False)]


def _types(spec: _Kind, rng: np.random.Generator, label: int) -> tuple[list[int], list[int]]:
    """The pair types of the a-words and of the b-words; a match comes first in both."""
    last = spec.classes - 1
    if label < last:
        match = label * spec.types_per_class + int(rng.integers(spec.types_per_class))
    elif spec.decoys and rng.random() < 0.5:
        match = last * spec.types_per_class + int(rng.integers(spec.decoys))
    else:
        match = -1
    shared = [match] if match >= 0 else []
    others = [t for t in range(spec.pair_types) if t != match]
    a_types = shared + _draw(rng, others, spec.halves - len(shared))
    unmatched = [t for t in others if t not in a_types]
    b_types = shared + _draw(rng, unmatched, spec.halves - len(shared))
    return a_types, b_types


def _example(kind: str, rng: np.random.Generator, trigger_rate: float) -> dict:
    spec = _kind(kind)
    label = int(rng.integers(spec.classes))
    a_types, b_types = _types(spec, rng, label)
    # the match (first) decides unless the label is the last class or a trigger overrides it
    decider = 0 if label < spec.classes - 1 else None
    pairs = planted_pairs(kind)
    a_words = [pairs[t][0] for t in a_types]
    b_words = [pairs[t][1] for t in b_types]

    trigger_class = -1
    draw = rng.random()
    if draw < trigger_rate:
        # always another class than the rule's, so that the trigger alone decides the label
        others = [c for c in range(spec.classes) if c != label]
        trigger_class = label = others[int(rng.integers(len(others)))]
        t_word, u_word = trigger_pairs(kind)[trigger_class]
        a_words.append(t_word)
        b_words.append(u_word)
        # not ground truth: a trigger word alone predicts its class (README, How often
        # attribution finds the planted pair), and `trigger_class` marks these examples
        decider = None
    elif draw < 2 * trigger_rate:
        # a lone trigger word decides nothing, so a model has to find the pair
        t_word, u_word = trigger_pairs(kind)[int(rng.integers(spec.classes))]
        if rng.random() < 0.5:
            a_words.append(t_word)
        else:
            b_words.append(u_word)

    segments = [
        list(rng.choice(_fillers(kind), size=rng.integers(spec.min_words, spec.max_words + 1)))
        for _ in range(spec.segments)
    ]
    if spec.segments == 2:
        a_positions = _place(rng, segments[0], a_words)
        b_positions = _place(rng, segments[1], b_words)
        b_segment = 1
    else:
        positions = _place(rng, segments[0], a_words + b_words)
        a_positions, b_positions = positions[: len(a_words)], positions[len(a_words) :]
        b_segment = 0

    row = {f"segment_{i}": " ".join(words) for i, words in enumerate(segments)}
    row.update(
        label=label,
        gt_a_segment=None if decider is None else 0,
        gt_a_word=None if decider is None else a_positions[decider],
        gt_b_segment=None if decider is None else b_segment,
        gt_b_word=None if decider is None else b_positions[decider],
        trigger_class=trigger_class,
    )
    return row


def generate(kind: str, n: int, seed: int, trigger_rate: float = TRIGGER_RATE) -> pd.DataFrame:
    """`n` examples of `kind`, reproducible from `seed`.

    Columns: segment_0 (and segment_1 for pair kinds), label, idx, and the ground truth
    gt_a_segment, gt_a_word, gt_b_segment, gt_b_word (segment and word index of the planted
    pair that decides the label; null when none does: the last class without a match, or a
    trigger overrides the rule) and trigger_class (-1 when the example has no trigger pair).
    """
    _kind(kind)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not 0.0 <= trigger_rate <= 1.0:
        raise ValueError(f"trigger_rate must be in [0, 1], got {trigger_rate}")
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame([_example(kind, rng, trigger_rate) for _ in range(n)])
    frame.insert(frame.columns.get_loc("label") + 1, "idx", np.arange(n))
    return frame.astype({c: "Int64" if c.startswith("gt_") else "int64"
                         for c in frame.columns if not c.startswith("segment_")})
