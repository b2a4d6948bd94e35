"""A planted induction task for decoder language models: "… A B … A" -> B.

Each sequence is random words with one segment R repeated: noise, R, noise, then the first k+1
words of R again. Its last word is A = R[k], which occurred once before, followed by B =
R[k+1]; the next word is B. A model can only predict it by induction (Olsson et al. 2022): a
previous-token head writes "A came before me" at B's first position, and an induction head at
the last position looks for that and copies B. Every word of a sequence is distinct apart from
the repeat, so the earlier occurrence of A, and hence B, is unique.

Ground truth per example, as word positions of the text (0 = its first word): `gt_induction`,
B's first position (where an induction head at the last word must read); `gt_previous`, A's
first position (where a previous-token head at B's first position reads). The whole repeated
part (positions after the second copy starts) is also predictable by induction, which training
uses (`lm_labels`); the task's target is B at the last position only.

The standard protocol of induction-head studies (Olsson et al. 2022), for a pretrained model
(`repeat`): a document start, T random words, then the first k+1 of the same T again (no noise;
k drawn from 0..T-2), so that every position of the second copy is a query whose next word only
the first copy tells. Its words are common English words that GPT-2-style byte-level tokenizers
(GPT-2's, SmolLM2's) each read as one token after a space, so the words are random tokens;
the start is those tokenizers' document separator, and it is word 0 of the positions.
The same protocol on real text (`repeated_sentences`, config tasks.<name>.repeat) takes the T
words from a sentence instead: a run of consecutive distinct words of letters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

VOCABULARY_SIZE = 64  # words v0 .. v63
COLUMNS = ["text", "target", "idx", "gt_induction", "gt_previous", "repeat_start"]
# the standard protocol's words: one token each after a space in GPT-2's and SmolLM2's
# tokenizers (tests/test_gguf.py checks SmolLM2's), 64 so that T up to 64 draws distinct ones
COMMON_WORDS = (
    "type group women family program object area control value order cost model line tool "
    "plant role country book story field paper heart mind space past flow amount author kind "
    "parent record path century science brain ground event subject sound city house team file "
    "engine market action idea target society surface color music money adult culture review "
    "article site drug skin week love weight content").split()
# the document separator of GPT-2's, SmolLM2's and Qwen2's tokenizers: the protocol's BOS
DOCUMENT_START = "<|endoftext|>"


def words() -> list[str]:
    """Every word a sequence of the planted task can hold."""
    return [f"v{i}" for i in range(VOCABULARY_SIZE)]


@dataclass(frozen=True)
class Layout:
    """How a sequence is drawn: from `vocabulary`, a segment R of `segment` words (inclusive
    range) with `noise` words (inclusive range) before R and between its copies, after `start`
    (a word of its own, or none)."""

    vocabulary: tuple[str, ...]
    segment: tuple[int, int]
    noise: tuple[int, int]
    start: str | None = None


PLANTED = Layout(tuple(words()), segment=(4, 8), noise=(0, 4))


def repeat(length: int) -> Layout:
    """The standard protocol with T = `length` words (the module's docstring)."""
    if not 2 <= length <= len(COMMON_WORDS):
        raise ValueError(f"the repeated words are 2 to {len(COMMON_WORDS)}, got {length}")
    return Layout(tuple(COMMON_WORDS), segment=(length, length), noise=(0, 0),
                  start=DOCUMENT_START)


def _example(rng: np.random.Generator, layout: Layout) -> dict:
    m = int(rng.integers(layout.segment[0], layout.segment[1] + 1))
    before, between = (int(n) for n in rng.integers(layout.noise[0], layout.noise[1] + 1,
                                                    size=2))
    drawn = [layout.vocabulary[i] for i in rng.choice(len(layout.vocabulary),
                                                      size=before + m + between, replace=False)]
    noise, segment = drawn[: before + between], drawn[before + between :]
    return _sequence(segment, noise[:before], noise[before:], k=int(rng.integers(0, m - 1)),
                     start=layout.start)


def _sequence(segment: list[str], before: list[str], between: list[str], *, k: int,
              start: str | None) -> dict:
    """One example: `before`, the segment R, `between`, then R up to A = R[k]; the target is
    B = R[k + 1]."""
    sequence = before + segment + between + segment[: k + 1]
    offset = len(before)
    if start is not None:
        sequence, offset = [start, *sequence], offset + 1
    return {
        "text": " ".join(sequence),
        "target": segment[k + 1],
        "gt_induction": offset + k + 1,
        "gt_previous": offset + k,
        # the first word of the second copy: from there on every next word is R's
        "repeat_start": offset + len(segment) + len(between),
    }


def distinct_run(sentence: str, length: int) -> list[str] | None:
    """The first run of `length` consecutive words of `sentence` (split at white space) that are
    distinct and of letters only, so that each occurs once and reads as a word; None if the
    sentence has none."""
    run: list[str] = []
    for word in sentence.split():
        if not word.isalpha():
            run = []
            continue
        if word in run:
            run = run[run.index(word) + 1 :]
        run.append(word)
        if len(run) == length:
            return run
    return None


def repeated_sentences(sentences: list[str], length: int, seed: int) -> pd.DataFrame:
    """The standard protocol on real text (`repeat`, with T = `length` words of one sentence
    instead of random ones): a prompt for each sentence that has a `distinct_run`, in an order
    drawn with `seed`; columns COLUMNS. Real words may be several tokens each: the ground
    truth positions are words, which attnlab.engine.next_token maps to their first tokens."""
    runs = [run for run in (distinct_run(s, length) for s in sentences) if run is not None]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(runs))
    frame = pd.DataFrame([_sequence(runs[i], [], [], k=int(rng.integers(0, length - 1)),
                                    start=DOCUMENT_START) for i in order],
                         columns=[c for c in COLUMNS if c != "idx"])
    frame.insert(2, "idx", np.arange(len(frame)))
    return frame[COLUMNS].astype({c: "int64" for c in COLUMNS[2:]})


def generate(n: int, seed: int, layout: Layout = PLANTED) -> pd.DataFrame:
    """`n` induction examples drawn as `layout` says, reproducible from `seed`; columns COLUMNS
    (see the module)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame([_example(rng, layout) for _ in range(n)])
    frame.insert(2, "idx", np.arange(n))
    return frame[COLUMNS].astype({c: "int64" for c in COLUMNS[2:]})
