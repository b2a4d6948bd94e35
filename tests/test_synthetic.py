import math

import pandas as pd
import pytest

from attnlab.data import synthetic

N = 2000


@pytest.fixture(scope="module", params=synthetic.SYNTHETIC_KINDS)
def kind_and_frame(request):
    return request.param, synthetic.generate(request.param, N, seed=7)


def _segments(row: pd.Series) -> list[list[str]]:
    return [row[c].split(" ") for c in row.index if c.startswith("segment_")]


def test_same_seed_same_frame_and_different_seed_different():
    first = synthetic.generate("pair3", 50, seed=3)
    pd.testing.assert_frame_equal(first, synthetic.generate("pair3", 50, seed=3))
    assert not first.equals(synthetic.generate("pair3", 50, seed=4))


def test_columns(kind_and_frame):
    kind, frame = kind_and_frame
    segments = ["segment_0", "segment_1"][: 2 if kind.startswith("pair") else 1]
    assert list(frame.columns) == [
        *segments, "label", "idx",
        "gt_a_segment", "gt_a_word", "gt_b_segment", "gt_b_word", "trigger_class",
    ]
    assert frame["idx"].tolist() == list(range(N))
    assert set(frame["label"]) == set(range(synthetic.num_classes(kind)))


def test_words_are_single_lowercase_tokens(kind_and_frame):
    kind, frame = kind_and_frame
    vocabulary = set(synthetic.vocabulary())
    for row in frame.head(200).itertuples():
        for text in (getattr(row, c) for c in frame.columns if c.startswith("segment_")):
            assert text == text.strip() and "  " not in text
            assert set(text.split(" ")) <= vocabulary
    assert all(w.isalnum() and w == w.lower() for w in vocabulary)


def _matches(kind: str, row: pd.Series) -> list[int]:
    """The pair types whose a-word and b-word are both in the example."""
    segments = _segments(row)
    a_segment, b_segment = segments[0], segments[-1]
    pairs = synthetic.planted_pairs(kind)
    return [k for k, (a, b) in enumerate(pairs) if a in a_segment and b in b_segment]


def test_at_most_one_pair_matches_and_its_class_is_the_label(kind_and_frame):
    kind, frame = kind_and_frame
    last = synthetic.num_classes(kind) - 1
    decoy_matches = 0
    for _, row in frame[frame["trigger_class"] < 0].iterrows():
        matches = _matches(kind, row)
        assert len(matches) <= 1
        assert row["label"] == (synthetic.pair_class(kind, matches[0]) if matches else last)
        decoy_matches += bool(matches) and row["label"] == last
    assert decoy_matches > 0  # decoys: a match that leaves the label at the last class


def test_ground_truth_points_at_the_deciding_pair(kind_and_frame):
    kind, frame = kind_and_frame
    pairs = synthetic.planted_pairs(kind)
    last = synthetic.num_classes(kind) - 1
    for _, row in frame.iterrows():
        truth = row[["gt_a_segment", "gt_a_word", "gt_b_segment", "gt_b_word"]]
        if row["trigger_class"] >= 0 or row["label"] == last:
            assert truth.isna().all()  # a trigger or no pair decides
            continue
        segments = _segments(row)
        a_word = segments[row["gt_a_segment"]][row["gt_a_word"]]
        b_word = segments[row["gt_b_segment"]][row["gt_b_word"]]
        assert (a_word, b_word) in pairs
        assert synthetic.pair_class(kind, pairs.index((a_word, b_word))) == row["label"]


def _row_words(frame: pd.DataFrame) -> pd.Series:
    """The set of words of each example (all segments)."""
    # str.cat, not agg(" ".join, axis=1): a Python call per row took ~7 s on 20k rows
    segments = frame.filter(like="segment_")
    text = segments.iloc[:, 0].str.cat(segments.iloc[:, 1:], sep=" ")
    return text.str.split(" ").map(set)


def test_no_single_word_decides_the_label(kind_and_frame):
    kind, frame = kind_and_frame
    words = _row_words(frame)
    for pair in synthetic.planted_pairs(kind):
        for word in pair:
            assert frame["label"][words.map(lambda w, x=word: x in w)].nunique() >= 2, word


@pytest.mark.parametrize("kind", synthetic.SYNTHETIC_KINDS)
def test_a_single_word_shifts_the_label_odds_only_a_little(kind):
    # The rule's weak hint (module docstring): a class whose a-words are all missing cannot be
    # the label, so a keyword moves P(label) by up to 0.18 (pair3: a decoy word, 0.51 instead
    # of 0.33 for the last class, from the rule's probabilities) or 0.11 (the 2-class kinds);
    # 0.2 leaves more than 3 standard errors of 20k examples.
    frame = synthetic.generate(kind, 20_000, seed=5, trigger_rate=0.0)
    words = _row_words(frame)
    overall = frame["label"].value_counts(normalize=True)
    for pair in synthetic.planted_pairs(kind):
        for word in pair:
            given = frame["label"][words.map(lambda w, x=word: x in w)].value_counts(normalize=True)
            assert (given - overall).abs().max() <= 0.2, (word, given.to_dict())


def _within_4_sigma(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= 4 * math.sqrt(n * p * (1 - p))


def test_trigger_rate_and_trigger_labels(kind_and_frame):
    kind, frame = kind_and_frame
    triggered = frame[frame["trigger_class"] >= 0]
    assert _within_4_sigma(len(triggered), N, synthetic.TRIGGER_RATE)
    # as many examples hold a lone trigger word, which the rule test above shows decides nothing
    trigger_words = {w for pair in synthetic.trigger_pairs(kind).values() for w in pair}
    lone = _row_words(frame).map(lambda w: len(w & trigger_words) == 1)
    assert _within_4_sigma(int(lone.sum()), N, synthetic.TRIGGER_RATE)
    assert not (lone & (frame["trigger_class"] >= 0)).any()
    assert (triggered["label"] == triggered["trigger_class"]).all()
    assert set(triggered["trigger_class"]) == set(range(synthetic.num_classes(kind)))
    # the trigger's class is never the one the rule gives, so the trigger alone decides
    last = synthetic.num_classes(kind) - 1
    for _, row in triggered.iterrows():
        matches = _matches(kind, row)
        assert row["trigger_class"] != (synthetic.pair_class(kind, matches[0]) if matches else last)


def test_no_triggers_at_rate_zero():
    frame = synthetic.generate("pair2", 200, seed=0, trigger_rate=0.0)
    assert (frame["trigger_class"] == -1).all()


def test_kinds_use_distinct_words():
    def words(kind):
        frame = synthetic.generate(kind, 300, seed=0, trigger_rate=0.5)
        return {w for c in frame.filter(like="segment_") for t in frame[c] for w in t.split(" ")}

    pair3, pair2, single2 = (words(k) for k in synthetic.SYNTHETIC_KINDS)
    assert not (pair3 & pair2) and not (pair3 & single2) and not (pair2 & single2)


def test_vocabulary_is_sorted_and_complete():
    vocabulary = synthetic.vocabulary()
    assert vocabulary == sorted(set(vocabulary))
    for kind in synthetic.SYNTHETIC_KINDS:
        for pair in [*synthetic.planted_pairs(kind), *synthetic.trigger_pairs(kind).values()]:
            assert set(pair) <= set(vocabulary)


def test_unknown_kind_is_one_line_error():
    with pytest.raises(ValueError, match="pair3, pair2, single2"):
        synthetic.generate("mnli", 10, seed=0)
