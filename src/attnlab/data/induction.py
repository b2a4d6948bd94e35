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
"""

from __future__ import annotations

import numpy as np
import pandas as pd

VOCABULARY_SIZE = 64  # words v0 .. v63
SEGMENT = (4, 8)  # length of the repeated segment R, inclusive range
NOISE = (0, 4)  # words before R and between its copies, inclusive range
COLUMNS = ["text", "target", "idx", "gt_induction", "gt_previous", "repeat_start"]


def words() -> list[str]:
    """Every word a sequence can hold."""
    return [f"v{i}" for i in range(VOCABULARY_SIZE)]


def _example(rng: np.random.Generator) -> dict:
    m = int(rng.integers(SEGMENT[0], SEGMENT[1] + 1))
    before, between = (int(n) for n in rng.integers(NOISE[0], NOISE[1] + 1, size=2))
    drawn = [f"v{i}" for i in rng.choice(VOCABULARY_SIZE, size=before + m + between,
                                          replace=False)]
    noise, segment = drawn[: before + between], drawn[before + between :]
    k = int(rng.integers(0, m - 1))  # A = segment[k], B = segment[k + 1]
    sequence = noise[:before] + segment + noise[before:] + segment[: k + 1]
    return {
        "text": " ".join(sequence),
        "target": segment[k + 1],
        "gt_induction": before + k + 1,
        "gt_previous": before + k,
        # the first word of the second copy: from there on every next word is R's
        "repeat_start": before + m + between,
    }


def generate(n: int, seed: int) -> pd.DataFrame:
    """`n` induction examples, reproducible from `seed`; columns COLUMNS (see the module)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame([_example(rng) for _ in range(n)])
    frame.insert(2, "idx", np.arange(n))
    return frame[COLUMNS].astype({c: "int64" for c in COLUMNS[2:]})
