"""Trigger mining and the attack: which tokens a pattern takes, how patterns are ranked, where
inserted tokens land (never on special tokens), and how the attack's claims are judged; over a
real WordPiece tokenizer, patterns of whole words a reader would type, inserted between words."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import DEFAULT_CONFIG, learned_metrics
from test_dumps import CFG, MODEL_CFG, tiny_task_model
from test_trees import PIECES, SENTENCE, wordpiece_row
from transformers import BertConfig, BertForSequenceClassification

from attnlab.analyses import attack, triggers, verdicts
from attnlab.analyses.claims import NotTestable
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
    attacked = attack.attack_examples(model, dev, spec, tokenizer, trigger, ["mw1", "mw2"], cfg,
                                      model_cfg, seed=0)
    assert len(attacked) == 2 * 30  # (trigger, random) x dev example
    table = attack.class_table(attacked)
    assert len(table) == 2 * 3  # (trigger, random) x gold class
    by_hand = dev.assign(premise=dev["premise"] + " mt0", hypothesis=dev["hypothesis"] + " mu0")
    inputs = examples.encode(by_hand, spec, tokenizer, 64)
    predicted = examples.predict(model, inputs).argmax(-1).numpy()
    rows = table[table["variant"] == "trigger"].set_index("gold_class")
    for c in range(3):
        gold = dev["label"].to_numpy() == c
        assert rows.loc[c, "examples"] == gold.sum()
        assert rows.loc[c, "accuracy_after"] == pytest.approx((predicted[gold] == c).mean())


def _examples(before: list[float], trigger: list[float], random: list[float]) -> pd.DataFrame:
    """attack_examples of one class-0 trigger on dev examples of class 1 (per example: correct
    before, after the trigger, after random words), and one class-1 example it leaves out."""
    rows = []
    for variant, after in (("trigger", trigger), ("random", random)):
        rows += [{"trigger_class": 0, "rank": 1, "trigger": "x", "variant": variant,
                  "example": e, "gold_class": 1, "correct_before": b, "correct_after": a}
                 for e, (b, a) in enumerate(zip(before, after, strict=True))]
        rows.append({"trigger_class": 0, "rank": 1, "trigger": "x", "variant": variant,
                     "example": len(before), "gold_class": 0, "correct_before": 1.0,
                     "correct_after": 0.0})
    return pd.DataFrame(rows)


def test_example_drops_average_the_triggers_of_other_classes_per_example():
    examples = pd.concat([_examples([1, 1, 0], [0, 1, 1], [1, 1, 0]).assign(rank=1),
                          _examples([1, 1, 0], [0, 0, 0], [1, 0.5, 0]).assign(rank=2)])
    drops = attack.example_drops(examples)
    assert drops.index.tolist() == [0, 1, 2]  # example 3 is the trigger's own class
    assert drops["trigger"].tolist() == [1.0, 0.5, -0.5]
    assert drops["random"].tolist() == [0.0, 0.25, 0.0]
    assert attack.class_table(examples).set_index(["rank", "variant", "gold_class"]).loc[
        (2, "random", 1), "accuracy_after"] == pytest.approx(0.5)


def test_attack_findings_are_judged_over_examples_paired_with_random_words():
    # 50 examples: the trigger breaks 30 of 50 correct ones, random words 2 of them
    before = [1.0] * 50
    good = attack.attack_claims(attack.example_drops(_examples(
        before, [0.0] * 30 + [1.0] * 20, [0.0] * 2 + [1.0] * 48)), None, top=3)
    assert [c["claim"] for c in good] == [
        "inserting the mined triggers lowers accuracy on the other classes",
        "the triggers lower it more than random words at the same positions"]
    assert [c["verdict"] for c in good] == ["holds", "holds"]
    assert good[0]["value"] == pytest.approx(0.6) and good[1]["value"] == pytest.approx(0.56)
    # the lead of paired hits has Newcombe's interval, about [0.40, 0.69]
    assert good[1]["n"] == 50 and good[1]["low"] > 0.35
    # no drop at all, with the trigger or random words: every resample of the drops gives 0,
    # an interval of no width; the trigger and random words both at the floor on every
    # example: neither is judged, each with its interval shown
    bad = attack.attack_claims(attack.example_drops(_examples(before, before, before)), None,
                               top=3)
    assert [c["verdict"] for c in bad] == ["not testable", "not testable"]
    assert [c["reason"] for c in bad] == ["every resample of the units gives 0: no interval",
                                          "at the floor (every unit at 0 on both sides)"]
    assert bad[1]["value"] == 0 and bad[1]["low"] < 0 < bad[1]["high"]
    # nothing evaluated: not testable, with the reason
    empty = attack.attack_claims(attack.example_drops(_examples([], [], [])), None, top=3)
    assert {c["verdict"] for c in empty} == {"not testable"} and empty[0]["reason"]


def _patterns(rows: list[tuple[int, list[str]]]) -> pd.DataFrame:
    """Kept one-segment patterns (predicted class, words), and one dropped one."""
    kept = [{"pred": c, "tokens": words, "segments": [0] * len(words), "kept": True}
            for c, words in rows]
    return pd.DataFrame([*kept, {"pred": 0, "tokens": ["p", "q"], "segments": [0, 0],
                                 "kept": False}])


def test_the_planted_margin_is_the_planted_pairs_lead_over_the_kth_rival_in_every_class():
    planted = {0: {"p", "q"}, 1: {"r", "s"}}
    # class 0: the pair 30 times against rivals 10, 6, 4; class 1: 20 against 20 (a tie)
    rows = ([(0, ["p", "q"])] * 30 + [(0, ["a"])] * 10 + [(0, ["b"])] * 6 + [(0, ["c"])] * 4
            + [(1, ["s", "r"])] * 20 + [(1, ["d"])] * 20)
    margin = triggers.planted_margin(_patterns(rows), planted, top=1)
    assert margin.estimate == 0 and margin.n == 90  # class 1 ties its top rival
    # top 3: class 0 leads its 3rd rival (4) by 26, class 1 has no 3rd rival: 20 of 90
    assert triggers.planted_margin(_patterns(rows), planted, top=3).estimate == pytest.approx(
        20 / 90)
    assert triggers.planted_margin(_patterns(rows), planted, top=3).low > 0.1
    # a class whose pair was never mined: the margin is minus its top rival's share
    missing = triggers.planted_margin(_patterns(rows[:50] + [(2, ["e"])] * 10),
                                      {0: {"p", "q"}, 2: {"x", "y"}}, top=1)
    assert missing.estimate == pytest.approx(-10 / 60) and missing.high < 0
    assert isinstance(triggers.planted_margin(_patterns([]).iloc[:0], planted, top=1),
                      NotTestable)


def test_the_planted_finding_is_judged_on_the_margin_and_left_out_on_real_data():
    drops = attack.example_drops(_examples([1.0] * 10, [0.0] * 10, [1.0] * 10))
    sure = verdicts.Interval(0.2, 0.1, 0.3, 90)
    tie = verdicts.Interval(0.0, -0.05, 0.05, 90)
    (planted, *_) = attack.attack_claims(drops, sure, top=3)
    assert planted["claim"] == "the mined top-3 triggers of every class include its planted pair"
    assert planted["verdict"] == "holds" and planted["n"] == 90
    assert attack.attack_claims(drops, tie, top=3)[0]["verdict"] == "inconclusive"
    assert len(attack.attack_claims(drops, None, top=3)) == 2


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
                "patterns": mined["patterns"], "source": mined["source"],
                "finetune_metrics": learned_metrics(tmp_path)}))
    table = pd.read_parquet(out["table"])
    # (trigger, random tokens) x gold class of the dev examples for each class's top trigger
    gold = pd.read_parquet(dev)["label"].nunique()
    assert len(table) == 2 * gold * ranked["class"].nunique()
    claims = pd.read_parquet(out["claims"])
    assert set(claims["task"]) == {"syn_mnli"} and set(claims["kind"]) == {"finding"}
    # the planted-trigger finding and the two attack findings
    assert claims["stage"].tolist() == ["triggers", "attack", "attack"]
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
