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

The findings are statistics of each dev example's drop in correctness (1 correct before and
wrong after, 0 unchanged, −1 the other way), averaged over the triggers of the classes other
than its own (`example_drops`), with their bootstrap intervals over those examples; triggers
against random words are paired (the same examples, the same positions).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from attnlab.analyses import verdicts
from attnlab.analyses.claims import NotTestable, finding, source
from attnlab.analyses.verdicts import Bar, Interval
from attnlab.data import tasks
from attnlab.data.words import text_words, typeable
from attnlab.engine import examples

# Our choice (we can quote no bar of the paper's for the attack, §6 and its table of
# accuracies after it not being in the copies we could search): the
# triggers lower accuracy on the other classes by at least 5 points, and by 5 points more than
# random words at the same positions.
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


def attack_examples(model, dev: pd.DataFrame, spec: tasks.TaskSpec, tokenizer,
                    triggers: pd.DataFrame, pool: list[str], cfg: Mapping[str, Any],
                    model_cfg: Mapping[str, Any], seed: int) -> pd.DataFrame:
    """Every dev example's correctness before and after inserting each of the top `cfg["top"]`
    triggers of every class, and after random words of `pool` (the mean over
    `cfg["random_draws"]` draws); `cfg["batch_size"]` examples per forward pass.

    Columns: trigger_class, rank, trigger (its words), variant ("trigger" or "random"), example
    (the dev row), gold_class, correct_before, correct_after.
    """
    labels = dev[spec.label_field].to_numpy()
    batch_size = cfg["batch_size"]

    def correct(split: pd.DataFrame) -> np.ndarray:
        return (predictions(model, split, spec, tokenizer, model_cfg, batch_size)
                == labels).astype(float)

    before = correct(dev)
    frames = []
    for trig in tqdm(triggers[triggers["rank"] <= cfg["top"]].to_dict("records"),
                     desc=f"attack {spec.name}", unit="trigger"):
        cls, rank, words = int(trig["class"]), int(trig["rank"]), list(trig["tokens"])
        where = (list(trig["segments"]), list(trig["rel_positions"]))
        variants = {"trigger": [words],
                    "random": [random_words(pool, len(words), [seed, cls, rank, draw])
                               for draw in range(cfg["random_draws"])]}
        for variant, word_lists in variants.items():
            after = np.mean([correct(attacked_split(dev, spec, inserted, *where, tokenizer))
                             for inserted in word_lists], axis=0)
            frames.append(pd.DataFrame({
                "trigger_class": cls, "rank": rank, "trigger": " ".join(words),
                "variant": variant, "example": np.arange(len(dev)), "gold_class": labels,
                "correct_before": before, "correct_after": after}))
    columns = ["trigger_class", "rank", "trigger", "variant", "example", "gold_class",
               "correct_before", "correct_after"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def class_table(examples: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per gold class before and after each trigger and its random words, from
    `attack_examples` (columns trigger_class, rank, trigger, variant, gold_class, examples,
    accuracy_before, accuracy_after; a class without dev examples has no row)."""
    return (examples.groupby(["trigger_class", "rank", "trigger", "variant", "gold_class"],
                              sort=False)
             .agg(examples=("example", "size"), accuracy_before=("correct_before", "mean"),
                  accuracy_after=("correct_after", "mean")).reset_index())


def example_drops(examples: pd.DataFrame) -> pd.DataFrame:
    """Per dev example of a class other than some evaluated trigger's (index: example): its
    drop in correctness, correct_before − correct_after, averaged over those triggers, with
    the trigger (column "trigger") and with random words at its positions ("random")."""
    other = examples[examples["gold_class"] != examples["trigger_class"]]
    drops = other.assign(drop=other["correct_before"] - other["correct_after"])
    return drops.pivot_table(index="example", columns="variant", values="drop",
                             aggfunc="mean").reindex(columns=["trigger", "random"])


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


def attack_claims(drops: pd.DataFrame, planted: Interval | NotTestable | None, top: int
                  ) -> list[dict]:
    """The attack's findings on the per-example drops (`example_drops`) and, where triggers
    were planted, the planted triggers' recovery (`triggers.planted_margin`; None on real
    data)."""
    claims = []
    if planted is not None:
        claims.append(finding(
            "triggers", f"the mined top-{top} triggers of every class include its planted pair",
            f"least, over the classes with a planted trigger pair, of its frequency among the "
            f"kept source patterns minus that of the class's {top}-th most frequent other "
            f"trigger, as a share of the patterns; 95 % interval over the source examples "
            f"(holds above 0: in every class the pair is among the top {top} by frequency "
            f"alone; bar: our choice, the paper has no planted triggers)",
            planted, Bar(0), source("hao2021", "triggers_attack")))
    n = len(drops)
    drop: Interval | NotTestable = NotTestable("no trigger was mined, or no dev example of "
                                               "another class")
    lead: Interval | NotTestable = drop
    if n:
        drop = verdicts.bootstrap(drops["trigger"].to_numpy(), scale=verdicts.SIGNED_UNIT)
        lead = verdicts.difference(drops["trigger"].to_numpy(), drops["random"].to_numpy(),
                                   paired=True)
    per_example = (f"drop in correctness of each of the {n} dev examples of another class than "
                   f"the trigger's, averaged over the evaluated triggers")
    claims += [
        finding("attack", "inserting the mined triggers lowers accuracy on the other classes",
                f"{per_example}, 95 % interval over the examples (holds above "
                f"{ATTACK_MIN_DROP}; bar: our choice)",
                drop, Bar(ATTACK_MIN_DROP), source("hao2021", "triggers_attack")),
        finding("attack", "the triggers lower it more than random words at the same positions",
                f"{per_example}, with the trigger minus with random words at its positions, "
                f"paired 95 % interval over the examples (holds above {ATTACK_MIN_DROP}; bar: "
                f"our choice; random words are our control)",
                lead, Bar(ATTACK_MIN_DROP), source("hao2021", "triggers_attack")),
    ]
    return claims
