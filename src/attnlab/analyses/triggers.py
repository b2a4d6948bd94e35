"""Adversarial triggers from over-confident attribution patterns (Hao et al. 2021 §6,
docs/methods.md): mining them.

The first `source_examples` examples of the source split are attributed to `target` (the
official code: the predicted label) by the same engine and writer as the dev dumps. Patterns
are made of words: where the tokenizer splits a word into pieces, the pieces are merged into
the word (a word pair's attribution is the sum over its pieces' pairs, attnlab.data.words), so a
pattern holds words a reader could type, never a piece such as "##ntal". In each example,
the head holding the largest attribution entry over all layers gives its two strongest (query,
key) pairs with scores s1 ≥ s2 (the official code's choice). The example's pattern is the words
at the positions of the first pair, and of the second pair too unless s2 < second_pair_ratio ·
s1 (official: 0.2), leaving out what a reader would not type as a trigger: special tokens
([CLS], [SEP], [UNK]; they cannot be inserted) and punctuation alone. Each word keeps its
segment and its relative position k/m there (the k-th of the segment's m words). Patterns with
s1 + s2 < score_threshold (official: 0.02) or with no word left are dropped. On a word-level
tokenizer (the synthetic tasks') the words are the tokens.

Aggregation per predicted class: patterns with the same words in the same segments are one
trigger; its frequency is the number of source examples showing it, its score their mean
s1 + s2. A class's triggers are ranked by frequency, then score; each keeps the positions of
its highest-scoring occurrence, the source example it is inserted like.

No attribution tree is involved: a pattern is one head's two strongest pairs, as in the
official code.

On a synthetic task with planted trigger pairs, `planted_margin` measures how surely mining
puts each class's planted pair among its top triggers, with an interval over the source
examples.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd
from transformers import PreTrainedTokenizerBase

from attnlab.analyses import verdicts
from attnlab.analyses.claims import NotTestable
from attnlab.data import synthetic
from attnlab.data.words import text_words, typeable


def relative_positions(segments: list[int], positions: list[int]) -> list[float]:
    """k/m for each position: the k-th (from 1) of the m tokens of its segment."""
    segments = np.asarray(segments)
    out = []
    for p in positions:
        inside = np.flatnonzero(segments == segments[p])
        out.append(float((p - inside[0] + 1) / len(inside)))
    return out


def example_pattern(row: pd.Series | dict, n_layers: int, n_heads: int,
                    second_pair_ratio: float, special: Collection[str]) -> dict[str, Any]:
    """The pattern of one dump row over words (`dumps.word_level`): its top head (layer, head),
    the two strongest pairs and their scores, and the typeable words (`special`: the
    tokenizer's special tokens) with their segments and relative positions."""
    k = len(row["top_i"]) // (n_layers * n_heads)  # pairs stored per head
    head = int(np.argmax(row["top_score"][::k]))  # each head's first pair is its maximum
    pairs = [(int(row["top_i"][head * k + r]), int(row["top_j"][head * k + r])) for r in (0, 1)]
    s1, s2 = (float(row["top_score"][head * k + r]) for r in (0, 1))
    used = pairs if s2 >= second_pair_ratio * s1 else pairs[:1]
    segments = list(row["segments"])
    positions = sorted({p for pair in used for p in pair
                        if segments[p] >= 0 and typeable(str(row["tokens"][p]), special)})
    return {
        "layer": head // n_heads, "head": head % n_heads,
        "pairs": [p for pair in pairs for p in pair], "s1": s1, "s2": s2, "score": s1 + s2,
        "positions": positions,
        "tokens": [str(row["tokens"][p]) for p in positions],
        "segments": [int(segments[p]) for p in positions],
        "rel_positions": relative_positions(segments, positions),
    }


def patterns_table(dump: pd.DataFrame, n_layers: int, n_heads: int, cfg: Mapping[str, Any],
                   special: Collection[str]) -> pd.DataFrame:
    """One pattern per source example (dump rows over words); `kept` says whether it passes
    the score threshold and has a word to insert. The column `tokens` holds the words."""
    rows = []
    for _, row in dump.iterrows():
        pattern = example_pattern(row, n_layers, n_heads, cfg["second_pair_ratio"], special)
        kept = pattern["score"] >= cfg["score_threshold"] and bool(pattern["tokens"])
        rows.append({"example": int(row["idx"]), "label": int(row["label"]),
                     "pred": int(row["pred"]), **pattern, "kept": kept})
    return pd.DataFrame(rows)


def trigger_key(segments: list[int], words: list[str]) -> tuple[tuple[int, str], ...]:
    """What makes two patterns of a class one trigger: the same words in the same segments."""
    return tuple(sorted(zip(segments, words, strict=True)))


def rank_triggers(patterns: pd.DataFrame, label_names: list[str],
                  planted: dict[int, set[str]]) -> pd.DataFrame:
    """Kept patterns aggregated per predicted class and ranked (see the module docstring).

    Columns: class, class_name, rank, tokens (the trigger's words), segments, rel_positions,
    frequency, mean_score, max_score, source_example, planted (whether the words are the
    class's planted trigger pair; null where the class has none).
    """
    kept = patterns[patterns["kept"]]
    rows = []
    for _, pattern in kept.iterrows():
        key = trigger_key(pattern["segments"], pattern["tokens"])
        rows.append({"class": int(pattern["pred"]), "key": key, "score": pattern["score"],
                     "example": pattern["example"]})
    columns = ["class", "class_name", "rank", "tokens", "segments", "rel_positions", "frequency",
               "mean_score", "max_score", "source_example", "planted"]
    if not rows:
        return pd.DataFrame(columns=columns)
    occurrences = pd.DataFrame(rows)
    by_example = kept.set_index("example")
    triggers = []
    for (cls, _), group in occurrences.groupby(["class", "key"], sort=True):
        best = by_example.loc[group.loc[group["score"].idxmax(), "example"]]
        tokens = list(best["tokens"])
        triggers.append({
            "class": cls, "class_name": label_names[cls], "tokens": tokens,
            "segments": list(best["segments"]), "rel_positions": list(best["rel_positions"]),
            "frequency": len(group), "mean_score": float(group["score"].mean()),
            "max_score": float(group["score"].max()),
            "source_example": int(group.loc[group["score"].idxmax(), "example"]),
            "planted": set(tokens) == planted[cls] if cls in planted else None,
        })
    table = pd.DataFrame(triggers).sort_values(
        ["class", "frequency", "mean_score"], ascending=[True, False, False], kind="stable")
    table["rank"] = table.groupby("class").cumcount() + 1
    return table[columns].reset_index(drop=True).astype({"planted": "boolean"})


def planted_triggers(task_cfg: Mapping[str, Any],
                     tokenizer: PreTrainedTokenizerBase) -> dict[int, set[str]]:
    """The words of each class's planted trigger pair, as the tokenizer reads them: synthetic
    tasks with a trigger rate above 0 only (other tasks have no known triggers)."""
    if task_cfg["source"] != "synthetic":
        return {}
    if task_cfg["synthetic"].get("trigger_rate", synthetic.TRIGGER_RATE) <= 0:
        return {}
    pairs = synthetic.trigger_pairs(task_cfg["synthetic"]["kind"])
    return {c: {read for word in pair for read, _, _ in text_words(word, tokenizer)}
            for c, pair in pairs.items()}


def planted_margin(patterns: pd.DataFrame, planted: dict[int, set[str]], top: int
                   ) -> verdicts.Interval | NotTestable:
    """How surely each class's planted pair is among its `top` triggers, by frequency alone:
    the least, over the classes of `planted`, of the planted pair's frequency among the kept
    patterns minus that of the class's `top`-th most frequent other trigger, as a share of the
    kept patterns, with its bootstrap interval over the source examples (their patterns
    resampled). Above 0, the pair is among the top in every class, whatever the scores; at 0
    the ranking rests on a tie of frequencies."""
    kept = patterns[patterns["kept"]]
    if kept.empty:
        return NotTestable("no source pattern was kept")
    keys = [(int(cls), trigger_key(segments, tokens))
            for cls, segments, tokens in zip(kept["pred"], kept["segments"], kept["tokens"],
                                             strict=True)]
    distinct = sorted(set(keys))
    index = {key: k for k, key in enumerate(distinct)}
    ids = np.array([index[key] for key in keys], dtype=float)
    classes = {cls: ([k for k, (c, words) in enumerate(distinct)
                      if c == cls and {w for _, w in words} == pair],
                     [k for k, (c, words) in enumerate(distinct)
                      if c == cls and {w for _, w in words} != pair])
               for cls, pair in planted.items()}

    def statistic(sample: np.ndarray) -> np.ndarray:
        counts = np.zeros((len(sample), len(distinct)))
        np.add.at(counts, (np.arange(len(sample))[:, None], sample.astype(int)), 1)
        margins = []
        for own, others in classes.values():
            found = counts[:, own].max(axis=1) if own else np.zeros(len(sample))
            rivals = -np.sort(-counts[:, others], axis=1)
            kth = rivals[:, top - 1] if rivals.shape[1] >= top else 0
            margins.append((found - kth) / sample.shape[1])
        return np.min(margins, axis=0)

    return verdicts.bootstrap(ids, statistic, scale=verdicts.SIGNED_UNIT)
