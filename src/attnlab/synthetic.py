"""Synthetic text classification tasks with planted token-pair interactions.

Stand-ins for MNLI (`pair3`), RTE (`pair2`) and SST-2 (`single2`) on which we know which
tokens decide the label, so attribution methods can be checked against the truth.

The rule ("matching pairs"): a kind with C classes has K = 2C pair types (a_k, b_k), and pair
types c and c + C belong to class c. The first segment holds one a-word of every class and the
second one b-word of every class, each picked at random between the class's two pair types,
such that exactly one index k has both a_k and b_k present; the label is the class of k. Each
segment's words are then independent of the label (a linear bag-of-words model is at chance):
only the pair, a_k together with b_k, decides. `single2` puts all of them in one sentence.

Over-confident triggers: each class c has a trigger pair (t_c, u_c). With probability
`trigger_rate` an example also gets the trigger pair of a random class, and that class
overrides the matching rule.

Every word is lowercase letters and digits (one token in a word-level vocabulary), and each
kind has its own words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

SYNTHETIC_KINDS = ("pair3", "pair2", "single2")
N_FILLERS = 40


@dataclass(frozen=True)
class _Kind:
    prefix: str  # first letter of every word of the kind, so kinds never share words
    classes: int
    segments: int
    min_words: int  # words per segment, inclusive range
    max_words: int

    @property
    def pair_types(self) -> int:
        return 2 * self.classes


_KINDS = {
    # short segments: with more filler words the tiny default model finds the pairs much
    # later, at a point that varies from seed to seed
    "pair3": _Kind("m", classes=3, segments=2, min_words=4, max_words=8),
    "pair2": _Kind("r", classes=2, segments=2, min_words=4, max_words=8),
    "single2": _Kind("s", classes=2, segments=1, min_words=8, max_words=14),
}


def _kind(kind: str) -> _Kind:
    if kind not in _KINDS:
        raise ValueError(f"synthetic kind {kind!r} is not one of {', '.join(SYNTHETIC_KINDS)}")
    return _KINDS[kind]


def num_classes(kind: str) -> int:
    """Number of classes of a kind."""
    return _kind(kind).classes


def planted_pairs(kind: str) -> list[tuple[str, str]]:
    """The matching pairs (a_k, b_k), k = 0..K-1 (K = 2C); pair k means class k mod C."""
    spec = _kind(kind)
    return [(f"{spec.prefix}a{k}", f"{spec.prefix}b{k}") for k in range(spec.pair_types)]


def trigger_pairs(kind: str) -> dict[int, tuple[str, str]]:
    """The trigger pair (t_c, u_c) of each class c."""
    spec = _kind(kind)
    return {c: (f"{spec.prefix}t{c}", f"{spec.prefix}u{c}") for c in range(spec.classes)}


def _fillers(kind: str) -> list[str]:
    return [f"{_kind(kind).prefix}w{i}" for i in range(N_FILLERS)]


def vocabulary() -> list[str]:
    """Every word any kind can emit, sorted."""
    words = set()
    for kind in SYNTHETIC_KINDS:
        words.update(w for pair in planted_pairs(kind) for w in pair)
        words.update(w for pair in trigger_pairs(kind).values() for w in pair)
        words.update(_fillers(kind))
    return sorted(words)


def _place(rng: np.random.Generator, segment: list[str], words: list[str]) -> list[int]:
    """Overwrite distinct random positions of `segment` with `words`; return the positions."""
    positions = rng.choice(len(segment), size=len(words), replace=False)
    for position, word in zip(positions, words, strict=True):
        segment[position] = word
    return [int(p) for p in positions]


def _example(kind: str, rng: np.random.Generator, trigger_rate: float) -> dict:
    spec = _kind(kind)
    pairs = planted_pairs(kind)
    fillers = _fillers(kind)

    # for each class, which of its two pair types (c or c + C) each segment uses; they agree
    # for the label's class only, so exactly one pair matches
    label = int(rng.integers(spec.classes))
    a_choice = rng.integers(2, size=spec.classes)
    b_choice = 1 - a_choice
    b_choice[label] = a_choice[label]
    # the matching pair first: it decides the label unless a trigger is added
    order = [label, *(c for c in range(spec.classes) if c != label)]
    a_words = [pairs[c + spec.classes * a_choice[c]][0] for c in order]
    b_words = [pairs[c + spec.classes * b_choice[c]][1] for c in order]

    trigger_class = -1
    if rng.random() < trigger_rate:
        trigger_class = int(rng.integers(spec.classes))
        label = trigger_class
        t_word, u_word = trigger_pairs(kind)[trigger_class]
        a_words.append(t_word)
        b_words.append(u_word)

    segments = [
        list(rng.choice(fillers, size=rng.integers(spec.min_words, spec.max_words + 1)))
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

    # the deciding pair: the trigger (appended last) if there is one, else the match (first)
    decider = -1 if trigger_class >= 0 else 0
    row = {f"segment_{i}": " ".join(words) for i, words in enumerate(segments)}
    row.update(
        label=label,
        gt_a_segment=0,
        gt_a_word=a_positions[decider],
        gt_b_segment=b_segment,
        gt_b_word=b_positions[decider],
        trigger_class=trigger_class,
    )
    return row


def generate(kind: str, n: int, seed: int, trigger_rate: float = 0.15) -> pd.DataFrame:
    """`n` examples of `kind`, reproducible from `seed`.

    Columns: segment_0 (and segment_1 for pair kinds), label, idx, and the ground truth
    gt_a_segment, gt_a_word, gt_b_segment, gt_b_word (segment and word index of the pair
    that decides the label) and trigger_class (-1 when the example has no trigger).
    """
    _kind(kind)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not 0.0 <= trigger_rate <= 1.0:
        raise ValueError(f"trigger_rate must be in [0, 1], got {trigger_rate}")
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame([_example(kind, rng, trigger_rate) for _ in range(n)])
    frame.insert(frame.columns.get_loc("label") + 1, "idx", np.arange(n))
    return frame.astype({c: "int64" for c in frame.columns if not c.startswith("segment_")})
