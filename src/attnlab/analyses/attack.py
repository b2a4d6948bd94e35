"""Attacking a model with its mined triggers (Hao et al. 2021 §6, docs/methods.md).

Each of a class's top triggers is inserted into every dev example: its words go into the same
segment at the same relative position as in its source example. With r the relative position (k/m,
see attnlab.analyses.triggers) and c the number of words inserted into a segment of m' words, a
word goes to index round((m' + c) · r) of the segment (Python's round, half to even), at least one
past the word inserted before it: the official code's rule, which moves a word one on when it
lands on the previous one's index. Words are the tokenizer's (attnlab.data.words): a trigger word
goes into the text, between two of its words, never between the pieces of one, and the tokenizer
splits it into pieces as it would anywhere; on a word-level tokenizer (the synthetic tasks') words
are tokens. Nothing goes into the special tokens around a segment. The baseline inserts random
words (drawn from the distinct typeable words of the source examples) with the same count and
positions. Accuracy is measured per gold class before and after; the attack is non-targeted: it
succeeds when accuracy drops on the classes other than the trigger's own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from attnlab.analyses.claims import claim
from attnlab.data import tasks
from attnlab.data.words import text_words, typeable
from attnlab.engine import examples

# (c) of issue #4: the triggers drop accuracy on the other classes at least this many times
# more than random tokens at the same positions.
RANDOM_RATIO = 3.0
# "The triggers lower accuracy": the mean drop over the evaluated triggers is at least 5
# points, well above the noise of one model on a few hundred examples.
ATTACK_MIN_DROP = 0.05


def insert_tokens(tokens: list[str], new: list[str],
                  rel_positions: list[float]) -> tuple[list[str], list[int]]:
    """`tokens` with `new` inserted at their relative positions (module docstring); returns
    the new list and the indices the inserted tokens ended up at, in order of position."""
    out = list(tokens)
    placed: list[int] = []
    for r, token in sorted(zip(rel_positions, new, strict=True), key=lambda x: x[0]):
        index = max(round((len(tokens) + len(new)) * r), placed[-1] + 1 if placed else 0)
        index = min(index, len(out))
        out.insert(index, token)
        placed.append(index)
    return out, placed


def insert_words(text: str, spans: list[tuple[int, int]], new: list[str],
                 rel_positions: list[float]) -> str:
    """`text`, whose words lie at `spans` (start, end), with the words `new` inserted at their
    relative positions (`insert_tokens`' rule over its words): each goes before the word whose
    index it takes, or after the last word, with a space on either side where there is none;
    the text itself is left as it is."""
    out, _ = insert_tokens(spans, new, rel_positions)  # the text's words (spans) and new ones
    result, cursor, preceding = "", 0, 0
    for item in out:
        if isinstance(item, tuple):  # a word of the text
            preceding += 1
            continue
        at = spans[preceding][0] if preceding < len(spans) else spans[-1][1] if spans else 0
        result += text[cursor:at]
        cursor = at
        before = " " if result and not result[-1].isspace() else ""
        after = " " if text[at:at + 1].strip() else ""  # a word follows right here
        result += before + item + after
    return result + text[cursor:]


def insert_trigger(texts: list[str], words: list[str], segments: list[int],
                   rel_positions: list[float], tokenizer) -> list[str]:
    """An example's texts (one per segment) with the trigger's words inserted."""
    out = []
    for segment, text in enumerate(texts):
        mine = [w for w, s in zip(words, segments, strict=True) if s == segment]
        rels = [r for r, s in zip(rel_positions, segments, strict=True) if s == segment]
        if not mine:
            out.append(text)
            continue
        spans = [(start, end) for _, start, end in text_words(text, tokenizer)]
        out.append(insert_words(text, spans, mine, rels))
    return out


def attacked_split(dev: pd.DataFrame, spec: tasks.TaskSpec, words: list[str],
                   segments: list[int], rel_positions: list[float], tokenizer) -> pd.DataFrame:
    """The dev split with the trigger's words inserted into every example."""
    attacked = dev.copy()
    texts = [insert_trigger([row[f] for f in spec.text_fields], words, segments, rel_positions,
                            tokenizer) for _, row in dev.iterrows()]
    for k, field in enumerate(spec.text_fields):
        attacked[field] = [t[k] for t in texts]
    return attacked


def predictions(model, df: pd.DataFrame, spec: tasks.TaskSpec, tokenizer,
                model_cfg: Mapping[str, Any], batch_size: int) -> np.ndarray:
    """Predicted class of every example of a split."""
    inputs = examples.encoded_frame(df, spec, tokenizer, model_cfg)
    return examples.predict(model, inputs, None, batch_size).argmax(dim=-1).numpy()


def class_accuracy(labels: np.ndarray, predicted: np.ndarray, n_classes: int) -> list[dict]:
    """Examples and accuracy per gold class."""
    return [{"gold_class": c, "examples": int((labels == c).sum()),
             "accuracy": float((predicted[labels == c] == c).mean()) if (labels == c).any()
             else float("nan")} for c in range(n_classes)]


def random_words(pool: list[str], count: int, seed: list[int]) -> list[str]:
    """`count` words drawn from `pool` (without replacement while it lasts)."""
    rng = np.random.default_rng(seed)
    return [str(t) for t in rng.choice(pool, size=count, replace=len(pool) < count)]


def source_words(source: pd.DataFrame, special: Collection[str]) -> list[str]:
    """The distinct words of the source examples' dump rows over words (`dumps.word_level`)
    that a reader could type (`words.typeable`; special tokens left out), sorted: the pool
    random words are drawn from."""
    return sorted({w for words, segments in zip(source["tokens"], source["segments"],
                                                strict=True)
                   for w, s in zip(words, segments, strict=True)
                   if s >= 0 and typeable(str(w), special)})


def attack_table(model, dev: pd.DataFrame, spec: tasks.TaskSpec, tokenizer,
                 triggers: pd.DataFrame, pool: list[str], cfg: Mapping[str, Any],
                 model_cfg: Mapping[str, Any], seed: int) -> pd.DataFrame:
    """Accuracy per gold class before and after inserting each of the top `cfg["top"]`
    triggers of every class, and after random words of `pool` (mean over
    `cfg["random_draws"]`); `cfg["batch_size"]` examples per forward pass.

    Columns: trigger_class, rank, trigger (its words), variant ("trigger" or "random"),
    gold_class, examples, accuracy_before, accuracy_after.
    """
    labels = dev[spec.label_field].to_numpy()
    batch_size = cfg["batch_size"]
    n_classes = len(spec.label_names)
    before = class_accuracy(labels, predictions(model, dev, spec, tokenizer, model_cfg,
                                                batch_size), n_classes)
    top = triggers[triggers["rank"] <= cfg["top"]].to_dict("records")
    rows = []
    for trig in tqdm(top, desc=f"attack {spec.name}", unit="trigger"):
        cls, rank, words = int(trig["class"]), int(trig["rank"]), list(trig["tokens"])
        where = (list(trig["segments"]), list(trig["rel_positions"]))
        variants = {"trigger": [words],
                    "random": [random_words(pool, len(words), [seed, cls, rank, draw])
                               for draw in range(cfg["random_draws"])]}
        for variant, word_lists in variants.items():
            after = [class_accuracy(labels, predictions(
                model, attacked_split(dev, spec, inserted, *where, tokenizer), spec, tokenizer,
                model_cfg, batch_size), n_classes) for inserted in word_lists]
            rows += [{"trigger_class": cls, "rank": rank, "trigger": " ".join(words),
                      "variant": variant, "gold_class": c, "examples": before[c]["examples"],
                      "accuracy_before": before[c]["accuracy"],
                      "accuracy_after": float(np.mean([a[c]["accuracy"] for a in after]))}
                     for c in range(n_classes)]
    return pd.DataFrame(rows, columns=["trigger_class", "rank", "trigger", "variant",
                                       "gold_class", "examples", "accuracy_before",
                                       "accuracy_after"])


def other_class_summary(table: pd.DataFrame, label_names: list[str]) -> pd.DataFrame:
    """Per trigger: accuracy on the examples of the other classes before, after the trigger
    and after random words (columns trigger, trigger_class, rank, examples, before,
    trigger_after, random_after)."""
    columns = ["trigger", "trigger_class", "rank", "examples", "before", "trigger_after",
               "random_after"]
    other = table[table["gold_class"] != table["trigger_class"]].copy()
    if other.empty:
        return pd.DataFrame(columns=columns)
    other["correct_before"] = other["accuracy_before"] * other["examples"]
    other["correct_after"] = other["accuracy_after"] * other["examples"]
    sums = (other.rename(columns={"trigger": "tokens"})
            .groupby(["trigger_class", "rank", "tokens", "variant"], sort=False)
            [["examples", "correct_before", "correct_after"]].sum().reset_index())
    wide = sums.pivot(index=["trigger_class", "rank", "tokens", "examples", "correct_before"],
                      columns="variant", values="correct_after").reset_index()
    return pd.DataFrame({
        "trigger": [f"{label_names[c]} #{r}: {t}" for c, r, t in
                    zip(wide["trigger_class"], wide["rank"], wide["tokens"], strict=True)],
        "trigger_class": wide["trigger_class"], "rank": wide["rank"],
        "examples": wide["examples"],
        "before": wide["correct_before"] / wide["examples"],
        "trigger_after": wide["trigger"] / wide["examples"],
        "random_after": wide["random"] / wide["examples"],
    }).sort_values(["trigger_class", "rank"], ignore_index=True)


def attack_claims(summary: pd.DataFrame, triggers: pd.DataFrame, top: int) -> list[dict]:
    """The attack's statements, and ground truth (b) and (c) where triggers were planted."""
    claims = []
    planted = triggers[triggers["planted"].notna()]
    if len(planted):
        found = planted[planted["planted"] & (planted["rank"] <= top)].groupby("class").size()
        classes = sorted(set(planted["class"]))
        share = len(found) / len(classes)
        claims.append(claim(
            "triggers", f"the mined top-{top} triggers of every class include its planted pair",
            f"share of the {len(classes)} classes with a planted trigger pair among whose top-"
            f"{top} mined triggers it is (holds if = 1)", share, share == 1))
    if summary.empty:
        return claims
    drop_trigger = float((summary["before"] - summary["trigger_after"]).mean())
    drop_random = float((summary["before"] - summary["random_after"]).mean())
    # a random drop below one example's worth is no drop: floor it there to keep the ratio finite
    floor = 1 / summary["examples"].min()
    ratio = drop_trigger / max(drop_random, floor)
    claims += [
        claim("attack", "inserting the mined triggers lowers accuracy on the other classes",
              f"mean accuracy drop on the other classes over {len(summary)} triggers "
              f"(holds if >= {ATTACK_MIN_DROP})", drop_trigger, drop_trigger >= ATTACK_MIN_DROP),
        claim("attack", f"the triggers lower it at least {RANDOM_RATIO:g}x more than random "
              "tokens at the same positions",
              f"mean drop with triggers / mean drop with random tokens ({drop_random:.4f}, "
              f"floored at one example, {floor:.4f}; holds if >= {RANDOM_RATIO:g})",
              ratio, ratio >= RANDOM_RATIO),
    ]
    return claims
