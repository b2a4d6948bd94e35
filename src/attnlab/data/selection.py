"""Which rows of a data source become a task's examples: sentences cut from longer texts, a dev
split held out from the train split, a seeded sample of each split.

Every draw is made after sorting the rows by their content, so the same data give the same
examples whatever order their source lists them in (the hub's and a packaged copy's, say).
Each example keeps `source_row`, its row in the source split, so that what was held out and
drawn is recorded in the splits themselves.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

# A sentence ends at ., ! or ? followed by white space, or by a closing quote that stays with
# it; a period inside brackets ("(as ever.) dull.") ends none.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'])\s+")
# HTML line breaks, as IMDB reviews hold them
LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


def number_rows(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its row numbers in `source_row` (kept when it has them already)."""
    if "source_row" in df.columns:
        return df
    return df.assign(source_row=range(len(df)))


def sentences(df: pd.DataFrame, field: str, *, min_words: int, max_words: int) -> pd.DataFrame:
    """Every sentence of `field` with `min_words`..`max_words` words as a row of its own, with
    the other columns (the label) of the text it comes from, and that text in `source_text`."""
    texts = df[field].map(lambda text: LINE_BREAK.sub(" ", text))
    parts = texts.map(lambda text: [s.strip() for s in SENTENCE_END.split(text) if s.strip()])
    rows = (df.assign(source_text=df[field], **{field: parts})
            .explode(field, ignore_index=True).dropna(subset=[field]))
    words = rows[field].str.split().str.len()
    return rows[words.between(min_words, max_words)].reset_index(drop=True)


def canonical(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """`df` sorted by `columns`, so that seeded draws do not depend on the order the rows came
    in. Equal sentences cut from several texts are ordered by their whole text (`source_text`,
    dropped here): by source row, the text held out with one would depend on that order."""
    by_text = ["source_text"] if "source_text" in df.columns else []
    return (df.sort_values([*columns, *by_text, "source_row"], kind="stable")
            .drop(columns=by_text).reset_index(drop=True))


def draw(df: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
    """A seeded sample of `n` rows of canonically sorted `df` (all rows, shuffled, when `n` is
    None or not less than its length)."""
    n = len(df) if n is None else min(n, len(df))
    return df.sample(n=n, random_state=seed).reset_index(drop=True)


def select(
    train: pd.DataFrame,
    dev: pd.DataFrame | None,
    cfg: dict[str, Any],
    *,
    columns: list[str],
    seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A task's (train, dev) examples from its source splits, by the task's `sentences` and
    `rows` settings; `dev` None holds out rows.dev rows of `train` as the dev split."""
    cut = cfg.get("sentences")
    splits = []
    for split in (train, dev):
        if split is None:
            splits.append(None)
            continue
        split = number_rows(split)
        if cut:
            split = sentences(split, columns[0], min_words=cut["min_words"],
                              max_words=cut["max_words"])
        splits.append(canonical(split, columns))
    train, dev = splits
    rows = cfg.get("rows") or {}
    if dev is None:  # held out first, so that the train sample never sees these rows
        dev = draw(train, rows["dev"], seed)
        held_out = set(dev["source_row"])
        train = train[~train["source_row"].isin(held_out)].reset_index(drop=True)
    else:
        dev = draw(dev, rows.get("dev"), seed)
    # seed + 1: the train draw is not the dev draw over the same order
    return draw(train, rows.get("train"), seed + 1), dev
