"""Trigger mining and the attack: which tokens a pattern takes, how patterns are ranked, where
inserted tokens land (never on special tokens), and how the attack's claims are judged; over a
real WordPiece tokenizer, patterns of whole words a reader would type, inserted between words."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import DEFAULT_CONFIG
from test_dumps import CFG, MODEL_CFG, tiny_task_model
from test_trees import PIECES, SENTENCE, wordpiece_row
from transformers import BertConfig, BertForSequenceClassification

from attnlab.analyses import attack, triggers
from attnlab.data import synthetic, tasks, words
from attnlab.data.dumps import dump_frame, read_dump, word_level
from attnlab.engine import examples, models
from attnlab.model_job import ModelJob
from attnlab.stages import attack_eval, mine_triggers

SEGMENTS = [-1, 0, 0, 0, -1, 1, 1, -1]  # [CLS] a a a [SEP] b b [SEP]


def test_relative_position_is_rank_within_the_segment_over_its_length():
    assert triggers.relative_positions(SEGMENTS, [1, 2, 3, 5, 6]) == pytest.approx(
        [1 / 3, 2 / 3, 1.0, 0.5, 1.0])


SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _row(scores_of_head_1: tuple[float, float], pairs_of_head_1) -> dict:
    """A dump row with L = 2 layers, H = 2 heads, 2 pairs per head; head (0, 1) holds the
    largest attribution entry."""
    top_i, top_j, top_score = [0] * 8, [0] * 8, [0.001] * 8
    for r, ((i, j), s) in enumerate(zip(pairs_of_head_1, scores_of_head_1, strict=True)):
        top_i[2 + r], top_j[2 + r], top_score[2 + r] = i, j, s
    return {"idx": 4, "label": 1, "pred": 1, "attr_max": [0.1, 0.9, 0.3, 0.2],
            "top_i": top_i, "top_j": top_j, "top_score": top_score, "segments": SEGMENTS,
            "tokens": ["[CLS]", "x1", "x2", "x3", "[SEP]", "y1", "y2", "[SEP]"]}


def test_pattern_takes_the_top_head_and_leaves_special_tokens_out():
    pattern = triggers.example_pattern(_row((0.5, 0.2), [(0, 2), (5, 6)]), 2, 2, 0.2, SPECIAL)
    assert (pattern["layer"], pattern["head"]) == (0, 1)
    assert pattern["pairs"] == [0, 2, 5, 6] and pattern["score"] == pytest.approx(0.7)
    assert pattern["tokens"] == ["x2", "y1", "y2"]  # [CLS] (position 0) cannot be inserted
    assert pattern["segments"] == [0, 1, 1]
    assert pattern["rel_positions"] == pytest.approx([2 / 3, 0.5, 1.0])
    # the second pair scores below 0.2 x the first: the first pair alone
    weak = triggers.example_pattern(_row((0.5, 0.09), [(0, 2), (5, 6)]), 2, 2, 0.2, SPECIAL)
    assert weak["tokens"] == ["x2"]


def test_patterns_below_the_threshold_or_without_tokens_are_not_kept():
    rows = pd.DataFrame([_row((0.5, 0.2), [(0, 2), (5, 6)]), _row((0.01, 0.005), [(0, 2), (5, 6)]),
                         _row((0.5, 0.2), [(0, 4), (7, 0)])])  # only [CLS] and [SEP]
    table = triggers.patterns_table(rows, 2, 2, {"score_threshold": 0.02,
                                                 "second_pair_ratio": 0.2}, SPECIAL)
    assert table["kept"].tolist() == [True, False, False]


def _pattern(example, pred, tokens, segments, rels, score):
    return {"example": example, "pred": pred, "tokens": tokens, "segments": segments,
            "rel_positions": rels, "score": score, "kept": True}


def test_triggers_are_ranked_by_frequency_per_class_with_their_best_positions():
    patterns = pd.DataFrame([
        _pattern(0, 0, ["t", "u"], [0, 1], [0.5, 0.5], 0.2),
        _pattern(1, 0, ["u", "t"], [1, 0], [0.25, 1.0], 0.3),  # the same trigger, other order
        _pattern(2, 0, ["t", "u"], [0, 1], [0.75, 0.2], 0.1),
        _pattern(3, 0, ["w"], [0], [0.5], 0.9),  # scores higher, but once only
        _pattern(4, 1, ["t", "u"], [0, 1], [0.5, 0.5], 0.4),
        {**_pattern(5, 1, ["z"], [1], [0.5], 5.0), "kept": False},
    ])
    ranked = triggers.rank_triggers(patterns, ["neg", "pos"], {0: {"t", "u"}})
    first = ranked[ranked["class"] == 0].set_index("rank")
    assert first.loc[1, "frequency"] == 3 and first.loc[1, "mean_score"] == pytest.approx(0.2)
    assert first.loc[1, "source_example"] == 1  # the highest-scoring occurrence ...
    assert list(first.loc[1, "tokens"]) == ["u", "t"]  # ... gives tokens and positions
    assert list(first.loc[1, "rel_positions"]) == [0.25, 1.0]
    assert bool(first.loc[1, "planted"]) and not bool(first.loc[2, "planted"])
    assert list(first.loc[2, "tokens"]) == ["w"]
    second = ranked[ranked["class"] == 1]
    assert len(second) == 1 and pd.isna(second["planted"].iloc[0])  # no planted pair known


@pytest.mark.parametrize("tokens, new, rels, expected, placed", [
    # one token halfway into 4: round(5 x 0.5) = 2 (Python rounds half to even)
    (list("abcd"), ["T"], [0.5], list("abTcd"), [2]),
    # at the very end of its source segment: the end of this one, never past it
    (list("abcd"), ["T"], [1.0], list("abcdT"), [4]),
    # two tokens at the same place: one after the other
    (list("abcd"), ["T", "U"], [0.25, 0.25], list("abTUcd"), [2, 3]),
    # given out of order: inserted in order of position
    (list("abcd"), ["X", "Y"], [0.9, 0.1], list("aYbcdX"), [1, 5]),
    # the second of 3 source tokens goes to round(6 x 2/3) = 4 of a 5-token segment
    (list("abcde"), ["T"], [2 / 3], list("abcdTe"), [4]),
    # near the start: the segment's first place
    (list("ab"), ["T"], [0.01], list("Tab"), [0]),
])
def test_insertion_positions(tokens, new, rels, expected, placed):
    out, where = attack.insert_tokens(tokens, new, rels)
    assert out == expected and where == placed


def test_trigger_goes_into_the_right_segment_of_a_pair(tokenizer):
    texts = attack.insert_trigger(["mw1 mw2 mw3", "mw4 mw5"], ["mu0", "mt0"], [1, 0],
                                  [0.5, 1.0], tokenizer)
    assert texts == ["mw1 mw2 mw3 mt0", "mw4 mw5 mu0"]
    encoded = tokenizer(*texts)
    assert tokenizer.convert_ids_to_tokens(encoded["input_ids"]) == [
        "[CLS]", "mw1", "mw2", "mw3", "mt0", "[SEP]", "mw4", "mw5", "mu0", "[SEP]"]
    single = attack.insert_trigger(["sw1 sw2 sw3 sw4"], ["st0", "su0"], [0, 0], [0.2, 0.8],
                                   tokenizer)
    assert single == ["sw1 st0 sw2 sw3 sw4 su0"]  # round(6 x 0.2) = 1, round(6 x 0.8) = 5


def test_trigger_tokens_never_land_on_special_tokens(tokenizer):
    """Any segment lengths, counts and relative positions in (0, 1]: after encoding, the
    special tokens are where they were and every trigger token sits inside a segment."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(1, 6, size=2)
        texts = [" ".join(f"mw{k}" for k in rng.integers(0, 40, size=m)) for m in lengths]
        count = int(rng.integers(1, 5))
        segments = rng.integers(0, 2, size=count).tolist()
        rels = rng.uniform(1e-3, 1.0, size=count).tolist()
        new = [f"mt{k % 3}" for k in range(count)]
        encoded = tokenizer(*attack.insert_trigger(texts, new, segments, rels, tokenizer))
        tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
        ids = encoded.sequence_ids()
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        assert [t for t, s in zip(tokens, ids, strict=True) if s is None] == [
            "[CLS]", "[SEP]", "[SEP]"]
        inserted = [s for t, s in zip(tokens, ids, strict=True) if t.startswith("mt")]
        assert sorted(inserted) == sorted(segments)  # each in its own segment


def test_random_words_are_seeded_draws_from_the_pool():
    pool = [f"w{k}" for k in range(20)]
    draw = attack.random_words(pool, 3, [0, 1, 2, 0])
    assert draw == attack.random_words(pool, 3, [0, 1, 2, 0]) and set(draw) <= set(pool)
    assert len(set(draw)) == 3  # without replacement while the pool lasts
    assert draw != attack.random_words(pool, 3, [0, 1, 2, 1])


def test_attack_accuracies_are_those_of_the_attacked_inputs(tokenizer):
    """Per gold class, accuracy after inserting a trigger equals that of a direct forward pass
    on texts with the trigger written in by hand."""
    spec = tasks.TaskSpec("t", ("premise", "hypothesis"), ("a", "b", "c"))
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=48, num_labels=3,
                        initializer_range=0.5)
    torch.manual_seed(0)
    model = models.prepare_model(BertForSequenceClassification(config))
    rng = np.random.default_rng(1)
    dev = pd.DataFrame({
        "premise": [" ".join(f"mw{k}" for k in rng.integers(0, 40, size=3)) for _ in range(30)],
        "hypothesis": [" ".join(f"mw{k}" for k in rng.integers(0, 40, size=2)) for _ in range(30)],
        "label": rng.integers(0, 3, size=30)})
    trigger = pd.DataFrame([{"class": 0, "rank": 1, "tokens": ["mt0", "mu0"], "segments": [0, 1],
                             "rel_positions": [1.0, 0.5]}])
    cfg = {"top": 1, "random_draws": 2, "batch_size": 7}
    model_cfg = {"max_length": 64, "truncate": False}
    table = attack.attack_table(model, dev, spec, tokenizer, trigger, ["mw1", "mw2"], cfg,
                                model_cfg, seed=0)
    assert len(table) == 2 * 3  # (trigger, random) x gold class
    by_hand = dev.assign(premise=dev["premise"] + " mt0", hypothesis=dev["hypothesis"] + " mu0")
    inputs = examples.encode(by_hand, spec, tokenizer, 64)
    predicted = examples.predict(model, inputs).argmax(-1).numpy()
    rows = table[table["variant"] == "trigger"].set_index("gold_class")
    for c in range(3):
        gold = dev["label"].to_numpy() == c
        assert rows.loc[c, "examples"] == gold.sum()
        assert rows.loc[c, "accuracy_after"] == pytest.approx((predicted[gold] == c).mean())


def _summary(before, trigger_after, random_after, examples=100) -> pd.DataFrame:
    return pd.DataFrame({"trigger": ["x", "y"], "trigger_class": [0, 1], "rank": [1, 1],
                         "examples": examples, "before": before, "trigger_after": trigger_after,
                         "random_after": random_after})


def _planted_triggers(rank_of_class_1: int) -> pd.DataFrame:
    return pd.DataFrame({"class": [0, 0, 1, 1], "rank": [1, 2, 1, rank_of_class_1],
                         "planted": pd.array([True, False, False, True], dtype="boolean")})


def test_attack_claims_hold_on_a_working_attack_and_fail_otherwise():
    good = attack.attack_claims(_summary([1.0, 0.9], [0.2, 0.1], [0.9, 0.85]),
                                _planted_triggers(2), top=3)
    assert [c["verdict"] for c in good] == ["holds"] * 3
    assert good[2]["value"] == pytest.approx(0.8 / 0.075)
    # a 2-point drop, random tokens hurt more; a planted pair ranked 4th is not top-3
    bad = attack.attack_claims(_summary([1.0, 0.9], [0.98, 0.88], [0.97, 0.87]),
                               _planted_triggers(4), top=3)
    assert [c["verdict"] for c in bad] == ["does not hold"] * 3
    assert bad[0]["value"] == pytest.approx(0.5)
    # no random drop at all: the ratio is taken against one example's worth (1/100)
    none = attack.attack_claims(_summary([1.0, 1.0], [0.5, 0.5], [1.0, 1.0]),
                                _planted_triggers(1), top=3)
    assert none[2]["value"] == pytest.approx(50.0) and none[2]["verdict"] == "holds"
    # real data: no planted pairs, no ground-truth claim
    assert len(attack.attack_claims(_summary([1.0, 1.0], [0.5, 0.5], [1.0, 1.0]),
                                    _planted_triggers(1).assign(planted=pd.NA), top=3)) == 2


def test_the_trigger_stages_write_what_their_rules_declare(pair_task, tmp_path):
    """mine_triggers on the first source examples, then attack_eval with what it mined: a random
    tiny model, so only the outputs' shape is known."""
    task, model_dir, dev = tiny_task_model(tmp_path, pair_task)
    config = {**DEFAULT_CONFIG, "tasks": {"syn_mnli": task}, "model": MODEL_CFG, "device": "cpu",
              "triggers": {**DEFAULT_CONFIG["triggers"], "source_examples": 4, "top": 1,
                           "random_draws": 1}}
    mined = {name: tmp_path / f"{name}.parquet" for name in ("source", "patterns", "triggers")}
    mine_triggers.run(ModelJob.from_config("mine_triggers", config, task="syn_mnli",
                                           inputs={"model": model_dir, "source": dev},
                                           outputs=mined))
    source, meta = read_dump(mined["source"])
    assert len(source) == 4 and meta["top_pairs"] == 3
    assert len(pd.read_parquet(mined["patterns"])) == 4
    ranked = pd.read_parquet(mined["triggers"])
    out = {"table": tmp_path / "attack.parquet", "claims": tmp_path / "claims.parquet",
           "figure": tmp_path / "attack.png"}
    attack_eval.run(ModelJob.from_config(
        "attack_eval", config, task="syn_mnli", outputs=out,
        inputs={"model": model_dir, "dev": dev, "triggers": mined["triggers"],
                "source": mined["source"]}))
    table = pd.read_parquet(out["table"])
    # (trigger, random tokens) x gold class for each class's top trigger
    assert len(table) == 2 * 3 * ranked["class"].nunique()
    assert set(pd.read_parquet(out["claims"])["task"]) == {"syn_mnli"}
    assert out["figure"].stat().st_size > 0


def _pieces_pattern(tokenizer, pairs: list[tuple[list[int], int, float]]) -> dict:
    """SENTENCE's dump row (tests/test_trees.py lists its tokens and words) whose head (1, 1)
    holds the largest attribution: for each (query tokens, key token, score), every query
    token reads the key token that score."""
    attr = torch.zeros(2, 2, 13, 13)
    for queries, key, score in pairs:
        attr[1, 1, queries, key] = score
    return {**wordpiece_row(tokenizer, attr, {**CFG, "top_pairs": 2}), "pred": 1}


def test_patterns_over_word_pieces_are_whole_words_a_reader_types(wordpiece_tokenizer):
    """The strongest pairs join two pieces of "unsentimental" with ",", and [CLS] with "film":
    the pattern is the two whole words, without the comma and [CLS]; one made of punctuation
    and special tokens alone is dropped."""
    strong = _pieces_pattern(wordpiece_tokenizer, [(PIECES[1:3], 6, 0.5), ([0], 10, 0.375)])
    by_token = triggers.example_pattern(strong, 2, 2, 0.2, SPECIAL)
    assert by_token["tokens"] == ["##sen", "##time"]  # what the tokens alone would give
    weak = _pieces_pattern(wordpiece_tokenizer, [([6], 11, 0.5), ([0], 12, 0.25)])
    dump = word_level(dump_frame([strong, {**weak, "idx": 1}]))
    table = triggers.patterns_table(dump, 2, 2, {"score_threshold": 0.02,
                                                 "second_pair_ratio": 0.2}, SPECIAL)
    first = table.iloc[0]
    assert (first["layer"], first["head"], first["score"]) == (1, 1, 1.375)
    assert first["tokens"] == ["unsentimental", "film"] and first["kept"]
    # relative positions among the sentence's 8 words: the 2nd and the 7th
    assert first["segments"] == [0, 0] and first["rel_positions"] == [2 / 8, 7 / 8]
    assert table.iloc[1]["tokens"] == [] and not table.iloc[1]["kept"]  # "," "." [CLS] [SEP]
    assert attack.source_words(dump, SPECIAL) == ["an", "crafted", "film", "unsentimental",
                                                  "well"]


@pytest.mark.parametrize("word, expected", [
    ("unsentimental", True), ("s", True), ("1990", True), ("well-made", True),
    (",", False), ("--", False), ("[UNK]", False), ("[CLS]", False),
])
def test_a_typeable_word_is_no_special_token_and_not_punctuation_alone(word, expected):
    assert words.typeable(word, SPECIAL) is expected


def test_trigger_words_go_between_words_and_are_split_into_pieces_again(wordpiece_tokenizer):
    """Any count and relative positions: the words of the attacked text are the sentence's
    words with the trigger's words inserted by the token rule over words, and the tokenizer
    splits an inserted word into its pieces."""
    sentence = [w for w, _, _ in words.text_words(SENTENCE, wordpiece_tokenizer)]
    rng = np.random.default_rng(0)
    for _ in range(100):
        count = int(rng.integers(1, 4))
        new = list(rng.choice(["unsentimental", "dull", "film"], size=count))
        rels = rng.uniform(1e-3, 1.0, size=count).tolist()
        (attacked,) = attack.insert_trigger([SENTENCE], new, [0] * count, rels,
                                            wordpiece_tokenizer)
        read = [w for w, _, _ in words.text_words(attacked, wordpiece_tokenizer)]
        assert read == attack.insert_tokens(sentence, new, rels)[0], attacked
    (attacked,) = attack.insert_trigger([SENTENCE], ["unsentimental"], [0], [1.0],
                                        wordpiece_tokenizer)
    assert attacked == "An unsentimental, well-crafted film. unsentimental"
    assert wordpiece_tokenizer.tokenize(attacked)[-4:] == ["un", "##sen", "##time", "##ntal"]


def test_insertion_on_a_word_level_tokenizer_is_the_token_rule_as_before(tokenizer):
    """Synthetic tasks: the texts are exactly those of inserting the tokens into the token list
    and writing it back, as the attack did before words."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        text = " ".join(f"mw{k}" for k in rng.integers(0, 40, size=int(rng.integers(1, 7))))
        count = int(rng.integers(1, 4))
        new = [f"mt{k}" for k in rng.integers(0, 3, size=count)]
        rels = rng.uniform(1e-3, 1.0, size=count).tolist()
        before = tokenizer.convert_tokens_to_string(
            attack.insert_tokens(tokenizer.tokenize(text), new, rels)[0])
        assert attack.insert_trigger([text], new, [0] * count, rels, tokenizer) == [before]


def test_planted_trigger_words_are_the_synthetic_tokens(pair_task, tokenizer):
    planted = triggers.planted_triggers(pair_task, tokenizer)
    pairs = synthetic.trigger_pairs(pair_task["synthetic"]["kind"])
    assert planted and planted == {c: {t for word in pair for t in tokenizer.tokenize(word)}
                                   for c, pair in pairs.items()}
