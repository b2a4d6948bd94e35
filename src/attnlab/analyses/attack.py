"""Attacking a model with its mined triggers (Hao et al. 2021 §6, docs/methods.md).

Each of a class's top triggers is inserted into every dev example: its tokens go into the same
segment at the same relative position as in its source example. With r the relative position (k/m,
see attnlab.analyses.triggers) and c the number of tokens inserted into a segment of m' tokens, a
token goes to index round((m' + c) · r) of the segment (Python's round, half to even), at least one
past the token inserted before it: the official code's rule, which moves a token one on when it
lands on the previous one's index. Tokens go into the segments' token lists, never into the special
tokens around them. The baseline inserts random tokens (drawn from the distinct tokens of the source
examples) with the same count and positions. Accuracy is measured per gold class before and after;
the attack is non-targeted: it succeeds when accuracy drops on the classes other than the trigger's
own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from attnlab.analyses.claims import claim
from attnlab.data import tasks
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


def insert_trigger(texts: list[str], tokens: list[str], segments: list[int],
                   rel_positions: list[float], tokenizer) -> list[str]:
    """An example's texts (one per segment) with the trigger tokens inserted."""
    out = []
    for segment, text in enumerate(texts):
        mine = [t for t, s in zip(tokens, segments, strict=True) if s == segment]
        rels = [r for r, s in zip(rel_positions, segments, strict=True) if s == segment]
        if not mine:
            out.append(text)
            continue
        new, _ = insert_tokens(tokenizer.tokenize(text), mine, rels)
        out.append(tokenizer.convert_tokens_to_string(new))
    return out


def attacked_split(dev: pd.DataFrame, spec: tasks.TaskSpec, tokens: list[str],
                   segments: list[int], rel_positions: list[float], tokenizer) -> pd.DataFrame:
    """The dev split with the trigger inserted into every example."""
    attacked = dev.copy()
    texts = [insert_trigger([row[f] for f in spec.text_fields], tokens, segments, rel_positions,
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


def random_tokens(pool: list[str], count: int, seed: list[int]) -> list[str]:
    """`count` tokens drawn from `pool` (without replacement while it lasts)."""
    rng = np.random.default_rng(seed)
    return [str(t) for t in rng.choice(pool, size=count, replace=len(pool) < count)]


def source_tokens(source: pd.DataFrame) -> list[str]:
    """The distinct tokens of the source examples' dump (special tokens left out), sorted: the
    pool random tokens are drawn from."""
    return sorted({t for tokens, segments in zip(source["tokens"], source["segments"],
                                                 strict=True)
                   for t, s in zip(tokens, segments, strict=True) if s >= 0})


def attack_table(model, dev: pd.DataFrame, spec: tasks.TaskSpec, tokenizer,
                 triggers: pd.DataFrame, pool: list[str], cfg: Mapping[str, Any],
                 model_cfg: Mapping[str, Any], seed: int) -> pd.DataFrame:
    """Accuracy per gold class before and after inserting each of the top `cfg["top"]`
    triggers of every class, and after random tokens (mean over `cfg["random_draws"]`);
    `cfg["batch_size"]` examples per forward pass.

    Columns: trigger_class, rank, trigger (its tokens), variant ("trigger" or "random"),
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
        cls, rank, tokens = int(trig["class"]), int(trig["rank"]), list(trig["tokens"])
        where = (list(trig["segments"]), list(trig["rel_positions"]))
        variants = {"trigger": [tokens],
                    "random": [random_tokens(pool, len(tokens), [seed, cls, rank, draw])
                               for draw in range(cfg["random_draws"])]}
        for variant, token_lists in variants.items():
            after = [class_accuracy(labels, predictions(
                model, attacked_split(dev, spec, inserted, *where, tokenizer), spec, tokenizer,
                model_cfg, batch_size), n_classes) for inserted in token_lists]
            rows += [{"trigger_class": cls, "rank": rank, "trigger": " ".join(tokens),
                      "variant": variant, "gold_class": c, "examples": before[c]["examples"],
                      "accuracy_before": before[c]["accuracy"],
                      "accuracy_after": float(np.mean([a[c]["accuracy"] for a in after]))}
                     for c in range(n_classes)]
    return pd.DataFrame(rows, columns=["trigger_class", "rank", "trigger", "variant",
                                       "gold_class", "examples", "accuracy_before",
                                       "accuracy_after"])


def other_class_summary(table: pd.DataFrame, label_names: list[str]) -> pd.DataFrame:
    """Per trigger: accuracy on the examples of the other classes before, after the trigger
    and after random tokens (columns trigger, trigger_class, rank, examples, before,
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
