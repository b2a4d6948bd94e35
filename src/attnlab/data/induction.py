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
    k = int(rng.integers(0, m - 1))  # A = segment[k], B = segment[k + 1]
    sequence = noise[:before] + segment + noise[before:] + segment[: k + 1]
    if layout.start is not None:
        sequence, before = [layout.start, *sequence], before + 1
    return {
        "text": " ".join(sequence),
        "target": segment[k + 1],
        "gt_induction": before + k + 1,
        "gt_previous": before + k,
        # the first word of the second copy: from there on every next word is R's
        "repeat_start": before + m + between,
    }


def generate(n: int, seed: int, layout: Layout = PLANTED) -> pd.DataFrame:
    """`n` induction examples drawn as `layout` says, reproducible from `seed`; columns COLUMNS
    (see the module)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame([_example(rng, layout) for _ in range(n)])
    frame.insert(2, "idx", np.arange(n))
    return frame[COLUMNS].astype({c: "int64" for c in COLUMNS[2:]})
