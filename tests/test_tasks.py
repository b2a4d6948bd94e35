import copy
import gzip
import importlib
import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import ROOT

from attnlab.data import selection, synthetic
from attnlab.data.prompts import read_prompts
from attnlab.data.tasks import (
    DataError,
    TaskSpec,
    load_split,
    planted_token_positions,
    prepare_task,
    read_local,
    read_task,
)
from attnlab.data.tokenization import build_tokenizer
from attnlab.engine import examples
from attnlab.engine.examples import encode
from attnlab.job import Job
from attnlab.plumbing import preflight
from attnlab.plumbing.config import load_config, validate_config
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.preflight import check_config
from attnlab.stages import prepare_data


def _local_task(train, dev) -> dict:
    return {
        "source": "local",
        "local": {"train": str(train), "dev": str(dev)},
        "text_fields": ["sentence1", "sentence2"],
        "label_names": ["entailment", "not_entailment"],
    }


def _good_frame(n: int = 6) -> pd.DataFrame:
    return pd.DataFrame({
        "sentence1": [f"ra{i % 4} rw1" for i in range(n)],
        "sentence2": [f"rb{i % 4} rw2 rw3" for i in range(n)],
        "label": [i % 2 for i in range(n)],
        "idx": list(range(n)),
    })


def _write(frame: pd.DataFrame, path) -> None:
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True)


def _error_of(call) -> str:
    with pytest.raises(DataError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_spec_from_config(pair_task):
    spec = TaskSpec.from_config("syn_mnli", pair_task)
    assert spec == TaskSpec(
        "syn_mnli", ("premise", "hypothesis"), ("entailment", "neutral", "contradiction")
    )


def test_prepare_synthetic_writes_glue_like_columns(tmp_path, pair_task):
    train, dev = tmp_path / "train.parquet", tmp_path / "dev.parquet"
    summary = prepare_task("syn_mnli", pair_task, 0, train, dev)
    frame = pd.read_parquet(train)
    assert list(frame.columns[:4]) == ["premise", "hypothesis", "label", "idx"]
    assert {"gt_a_word", "gt_b_word", "trigger_class"} <= set(frame.columns)
    assert summary["train"]["rows"] == 200 and summary["dev"]["rows"] == 60
    assert sum(summary["dev"]["label_counts"].values()) == 60
    # dev is drawn with another seed than train
    assert not set(pd.read_parquet(dev)["premise"]) & set(frame["premise"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.parquet", "train.parquet"]


def test_shuffled_labels_keep_the_texts_and_class_counts_and_break_the_rule(pair_task):
    _, train, dev, _ = read_task("syn_mnli", pair_task, 0)
    _, shuffled_train, shuffled_dev, _ = read_task("syn_mnli", {**pair_task,
                                                                "shuffle_labels": True}, 0)
    for plain, shuffled in ((train, shuffled_train), (dev, shuffled_dev)):
        # the same examples in the same order; only the label column moved
        pd.testing.assert_frame_equal(plain.drop(columns="label"),
                                      shuffled.drop(columns="label"))
        assert plain["label"].value_counts().equals(shuffled["label"].value_counts())
        # 3 balanced classes: a permutation keeps about a third of the labels in place (the
        # planted rule decides every label of the plain split); 0.5 is > 4 sigma above a
        # third at 60 dev rows
        assert (plain["label"] == shuffled["label"]).mean() < 0.5
    # the same seed, the same permutation
    again = read_task("syn_mnli", {**pair_task, "shuffle_labels": True}, 0)[1]
    assert again["label"].equals(shuffled_train["label"])


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".json"])
def test_local_round_trip(tmp_path, suffix):
    frame = _good_frame()
    _write(frame, tmp_path / f"in_train{suffix}")
    _write(frame.head(4), tmp_path / f"in_dev{suffix}")
    task = _local_task(tmp_path / f"in_train{suffix}", tmp_path / f"in_dev{suffix}")
    summary = prepare_task("rte", task, 0, tmp_path / "train.parquet", tmp_path / "dev.parquet")
    assert summary["dev"] == {"rows": 4, "label_counts": {"entailment": 2, "not_entailment": 2}}
    spec = TaskSpec.from_config("rte", task)
    loaded = load_split(tmp_path / "train.parquet", spec)
    pd.testing.assert_frame_equal(loaded, frame, check_dtype=False)


@pytest.mark.parametrize(("suffix", "encoding", "saved_as"), [
    (".csv", "utf-8", "utf-8-sig"),  # a byte-order mark, as spreadsheets write one
    (".json", "utf-8", "utf-8-sig"),
    (".csv", "latin-1", "latin-1"),
    (".json", "cp1252", "cp1252"),
    (".csv", "utf-16", "utf-16"),  # a spreadsheet's "Unicode text" export
])
def test_a_local_text_file_is_read_in_its_encoding(tmp_path, suffix, encoding, saved_as):
    frame = _good_frame().assign(sentence1=[f"café {i} naïve" for i in range(6)])
    path = tmp_path / f"in{suffix}"
    _write(frame, path)
    path.write_bytes(path.read_text(encoding="utf-8").encode(saved_as))
    task = {**_local_task(path, path), "local": {"train": str(path), "dev": str(path),
                                                 "encoding": encoding}}
    _, train, _, _ = read_task("rte", task, 0)
    pd.testing.assert_frame_equal(train, frame, check_dtype=False)


BAD_FRAMES = {
    "missing column 'sentence2' (columns are sentence1, label, idx)":
        _good_frame().drop(columns="sentence2"),
    "row 3: column 'label' has label 2; labels must be integers in 0..1":
        _good_frame().assign(label=[0, 1, 0, 2, 0, 1]),
    "row 0: column 'label' has label 'yes'": _good_frame().assign(label=["yes"] * 6),
    "row 0: column 'label' has label 0.5": _good_frame().assign(label=0.5),
    "row 2: column 'label' has label nan": _good_frame().assign(label=[0, 1, None, 1, 0, 1]),
    "row 1: column 'sentence1' is missing, not text":
        _good_frame().assign(sentence1=["a", None, "b", "c", "d", "e"]),
    "row 0: column 'sentence2' is 5, not text": _good_frame().assign(sentence2=5),
}


@pytest.mark.parametrize("problem", BAD_FRAMES)
def test_bad_local_data_is_one_line_error_and_writes_nothing(tmp_path, problem):
    good, bad = tmp_path / "good.parquet", tmp_path / "bad.parquet"
    _write(_good_frame(), good)
    _write(BAD_FRAMES[problem], bad)
    out = tmp_path / "out"
    message = _error_of(lambda: prepare_task(
        "rte", _local_task(good, bad), 0, out / "train.parquet", out / "dev.parquet"))
    assert problem in message and str(bad) in message
    assert not out.exists()


def test_whole_float_labels_become_integers(tmp_path):
    _write(_good_frame().assign(label=[0.0, 1.0] * 3), tmp_path / "in.json")
    task = _local_task(tmp_path / "in.json", tmp_path / "in.json")
    prepare_task("rte", task, 0, tmp_path / "train.parquet", tmp_path / "dev.parquet")
    assert pd.read_parquet(tmp_path / "dev.parquet")["label"].dtype == np.int64


def test_load_split_validates(tmp_path):
    spec = TaskSpec.from_config("rte", _local_task("x", "y"))
    path = tmp_path / "split.parquet"
    _good_frame().assign(label=-1).to_parquet(path)
    assert "has label -1" in _error_of(lambda: load_split(path, spec))
    _good_frame().head(0).to_parquet(path)
    assert "empty split" in _error_of(lambda: load_split(path, spec))
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    assert "cannot read as Parquet" in _error_of(lambda: load_split(junk, spec))


@pytest.mark.parametrize(("name", "content", "problem"), [
    ("nope.csv", None, "nope.csv: no such file"),
    ("empty.csv", "", "empty.csv: empty file"),
    ("broken.json", "{not json", "broken.json: line 1: cannot read as JSON lines (JSONDecodeError"),
    ("split.txt", "a", "split.txt is not a file type attnlab reads (.parquet, .csv, .tsv, "
                       ".json, .jsonl; a CSV, TSV or JSON lines file may be compressed: .gz, "),
    ("split.parquet.gz", "a", "split.parquet.gz is a compressed Parquet file: Parquet "
                              "compresses its columns itself"),
    # the header and rows, strictly: pandas would name an empty header cell "Unnamed: 1" and
    # take an extra field as the index (or, later on, stop without the file's name)
    ("blank.tsv", "sentence1\t\tlabel\na\tb\t1\n",
     "blank.tsv: line 1: column 2 has no name; name every column"),
    ("extra.csv", "sentence1,sentence2,label\na,b,1\na,b,1,oops\n",
     "extra.csv: line 3: 4 fields, more than the header's 3 (column 4 has no name)"),
    ("twice.tsv", "sentence1\tsentence2\tsentence1\tlabel\na\tb\tc\t1\n",
     "twice.tsv: line 1: column 3 repeats the name 'sentence1' of column 1"),
    ("unnamed.jsonl", '{"sentence1": "a", "sentence2": "b", "label": 1}\n{"": 1}\n',
     "unnamed.jsonl: line 2: key 1 has no name"),
    ("array.json", '[{"sentence1": "a", "sentence2": "b", "label": 1}]',
     "array.json: line 1: list, not an object of columns (JSON lines: one object a line)"),
    ("quote.csv", 'sentence1,sentence2,label\n"a,b,1\n',
     "quote.csv: line 2: cannot read as CSV (unexpected end of data)"),
])
def test_unreadable_local_file_is_one_line_error(tmp_path, name, content, problem):
    if content is not None:
        (tmp_path / name).write_text(content)
    task = _local_task(tmp_path / name, tmp_path / name)
    out = tmp_path / "out"
    message = _error_of(lambda: prepare_task("rte", task, 0, out / "a", out / "b"))
    assert problem in message
    assert not out.exists()


# A TSV, CSV and JSON lines text of the same rows, and the module that compresses each
# rows, and the module that compresses each, with a row of a label out of range
COMPRESSED = [
    ("train.tsv.xz", "lzma", "sentence1\tsentence2\tlabel\na b\tc\t1\nd\te f\t0\n",
     "x\ty\t7"),
    ("train.csv.gz", "gzip", 'sentence1,sentence2,label\n"a b",c,1\nd,e f,0\n', "x,y,7"),
    ("train.jsonl.bz2", "bz2", '{"sentence1": "a b", "sentence2": "c", "label": 1}\n'
                               '{"sentence1": "d", "sentence2": "e f", "label": 0}\n',
     '{"sentence1": "x", "sentence2": "y", "label": 7}'),
]


@pytest.mark.parametrize("name, module, text, bad", COMPRESSED)
def test_a_compressed_text_file_is_read_as_its_format(tmp_path, name, module, text, bad):
    compressed = tmp_path / name
    with importlib.import_module(module).open(compressed, "wt") as f:
        f.write(text)
    plain = tmp_path / name.rsplit(".", 1)[0]
    plain.write_text(text)
    (rows, origin), (expected, plain_origin) = (read_local(str(path), "utf-8", "k")
                                                for path in (compressed, plain))
    pd.testing.assert_frame_equal(rows, expected)
    assert origin.lines == plain_origin.lines and len(rows) == 2
    # a mistake is named by its line in the decompressed text (after a blank line here)
    with importlib.import_module(module).open(compressed, "wt") as f:
        f.write(text.replace("\n", "\n\n", 1) + bad + "\n")
    task = _local_task(compressed, compressed)
    message = _error_of(lambda: prepare_task("rte", task, 0, tmp_path / "a", tmp_path / "b"))
    line = len(text.splitlines()) + 2
    assert message.startswith(f"{compressed}: line {line}: column 'label' has label 7"), message


def test_a_damaged_compressed_file_is_one_line(tmp_path):
    path = tmp_path / "train.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("sentence1,sentence2,label\n" + "a,b,1\n" * 1000)
    path.write_bytes(path.read_bytes()[:-12])  # cut short, as an interrupted download leaves it
    with pytest.raises(DataError, match=rf"^{path}: cannot decompress \(EOFError: "):
        read_local(str(path), "utf-8", "k")


def test_a_zstandard_file_needs_its_module(tmp_path, monkeypatch):
    path = tmp_path / "train.csv.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd")
    monkeypatch.setattr(preflight, "find_spec", lambda name: None)  # as where it is missing
    with pytest.raises(DataError, match=re.escape(
            f"{path} is compressed with Zstandard, which needs the module zstandard (pip "
            "install zstandard), not installed here")):
        read_local(str(path), "utf-8", "k")


def test_a_parquet_file_that_names_a_column_twice_is_one_line(tmp_path):
    path = tmp_path / "twice.parquet"
    frame = _good_frame()
    pq.write_table(pa.Table.from_arrays([pa.array(frame[c]) for c in frame] + [pa.array(
        frame["label"])], names=[*frame.columns, "label"]), path)
    message = _error_of(lambda: read_task("rte", _local_task(path, path), 0))
    assert message.startswith(f"{path}: column 5 repeats the name 'label' of column 3")


def test_a_text_file_s_rows_are_named_by_the_line_they_start_on(tmp_path):
    # a quoted field over two lines, a blank line: the third row starts on line 6, and a TSV's
    # quotes are text
    csv_file, tsv_file = tmp_path / "rows.csv", tmp_path / "rows.tsv"
    csv_file.write_text('sentence1,sentence2,label\n"a\nb",c,0\nd,e,1\n\nf,"g ""h""",1\n')
    tsv_file.write_text('sentence1\tsentence2\tlabel\n"a\tb c"\t1\n')
    frame, origin = read_local(str(csv_file), "utf-8", "key")
    assert frame.to_dict("list") == {"sentence1": ["a\nb", "d", "f"],
                                     "sentence2": ["c", "e", 'g "h"'], "label": [0, 1, 1]}
    assert [origin.place(row) for row in range(3)] == ["line 2", "line 4", "line 6"]
    frame, _ = read_local(str(tsv_file), "utf-8", "key")
    assert frame.loc[0, "sentence1"] == '"a' and frame.loc[0, "sentence2"] == 'b c"'
    frame.to_parquet(tmp_path / "rows.parquet")
    assert read_local(str(tmp_path / "rows.parquet"), "utf-8", "key")[1].place(0) == "row 0"


def test_a_prompt_file_is_read_by_the_same_strict_reader(tmp_path):
    path = tmp_path / "prompts.csv"
    path.write_text("text,target,text\na b a,b,x\n")
    task = {"kind": "next_token", "source": "local", "text_fields": ["text"],
            "local": {"train": str(path), "dev": str(path)}}
    message = _error_of(lambda: read_prompts("p", task, 0))
    assert message == (f"{path}: line 1: column 3 repeats the name 'text' of column 1; name "
                       "every column once")


def test_encode_pairs_and_single_sentences(tokenizer, pair_task, single_task):
    for task in (pair_task, single_task):
        spec = TaskSpec.from_config("t", task)
        kind = task["synthetic"]["kind"]
        frame = synthetic.generate(kind, 20, seed=0).rename(
            columns=dict(zip(["segment_0", "segment_1"], spec.text_fields, strict=False)))
        encoded = encode(frame, spec, tokenizer, max_length=64)
        assert set(encoded) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
        assert encoded["input_ids"].shape == encoded["attention_mask"].shape
        assert torch.equal(encoded["labels"], torch.tensor(frame["label"].to_numpy()))
        # word-level vocabulary: no unknown tokens, one token per word
        assert (encoded["input_ids"] != tokenizer.unk_token_id).all()
        words = sum(len(frame[f].iloc[0].split(" ")) for f in spec.text_fields)
        assert int(encoded["attention_mask"][0].sum()) == words + 1 + len(spec.text_fields)


def _padded(lengths: list[int]) -> dict[str, torch.Tensor]:
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return {"input_ids": mask * 7, "attention_mask": mask, "labels": torch.arange(len(lengths))}


def test_sorted_batches_end_where_padding_would_pass_a_quarter_of_their_tokens():
    """5, 5, 6 fill 18 slots with 16 tokens; a 10 would make it 26 of 40 (35 % padding), so
    it starts a batch; 20 after 10, 10 would be 40 of 60."""
    blocks = [(rows, batch["attention_mask"].shape[1]) for rows, batch in
              examples.batches(_padded([5, 5, 6, 10, 10, 20]), batch_size=64)]
    assert blocks == [(slice(0, 3), 6), (slice(3, 5), 10), (slice(5, 6), 20)]


@pytest.mark.parametrize("seed", range(5))
def test_batches_take_every_row_once_within_the_batch_size_and_the_padding_share(seed):
    """On random lengths sorted as the stages sort them: the rows in order, each block at most
    batch_size rows and trimmed to its longest, padding at most a quarter of a block's slots
    (a block of one row has none); padding 1 gives the blocks of batch_size rows the stages
    had before the bound, which the adversaries' training keeps."""
    lengths = sorted(np.random.default_rng(seed).integers(3, 65, size=50).tolist())
    inputs = _padded(lengths)
    blocks = list(examples.batches(inputs, batch_size=16))
    assert [i for rows, _ in blocks for i in range(len(lengths))[rows]] == list(range(50))
    for rows, batch in blocks:
        real = batch["attention_mask"].sum()
        assert len(batch["labels"]) <= 16
        assert batch["attention_mask"].shape[1] == max(lengths[rows])
        assert real >= (1 - examples.PADDING) * batch["attention_mask"].numel()
        assert torch.equal(batch["labels"], inputs["labels"][rows])
    # one block of 64 would be about half padding: the bound cuts where the batch size does not
    assert len(list(examples.batches(inputs, batch_size=64))) >= 3
    assert [rows for rows, _ in examples.batches(inputs, 16, padding=1.0)] == [
        slice(i, min(i + 16, 50)) for i in range(0, 50, 16)]


def test_too_long_is_one_line_error_unless_truncating(tokenizer, single_task):
    spec = TaskSpec.from_config("t", single_task)
    frame = synthetic.generate("single2", 10, seed=0).rename(columns={"segment_0": "sentence"})
    message = _error_of(lambda: encode(frame, spec, tokenizer, max_length=8))
    assert "idx=0" in message and "model.max_length=8" in message and "model.truncate" in message
    assert encode(frame, spec, tokenizer, max_length=8, truncate=True)["input_ids"].shape[1] == 8


def _prepare_data(task: dict, out, max_length: int, truncate: bool = False) -> Job:
    """Rule prepare_data's job of task `task` (a scratch model), writing into `out`."""
    return Job(rule="prepare_data", inputs={"pretrained": []},
               outputs={split: str(out / name) for split, name in (
                   ("train", "train.parquet"), ("dev", "dev.parquet"),
                   ("summary", "summary.json"))},
               # parts: the tasks a mixed task mixes (none here)
               settings={"task": task, "parts": {}, "seed": 0, "model": {
                   "source": "scratch", "max_length": max_length, "truncate": truncate}},
               wildcards={"task": "syn_sst2"})


def test_prepare_data_refuses_an_example_too_long_for_the_model_before_writing(tmp_path,
                                                                                single_task):
    out = tmp_path / "out"
    message = _error_of(lambda: prepare_data.run(_prepare_data(single_task, out, 8)))
    # synthetic rows have no file: the generator and the row name the example
    assert "synthetic syn_sst2 train: row 0 is " in message and "model.max_length=8" in message
    assert not out.exists()
    # truncated by the model instead: the splits as prepare_task writes them, and their summary
    prepare_data.run(_prepare_data(single_task, out, 8, truncate=True))
    expected = prepare_task("syn_sst2", single_task, 0, tmp_path / "train.parquet",
                            tmp_path / "dev.parquet")
    summary = json.loads((out / "summary.json").read_text())
    assert {split: summary[split] for split in ("train", "dev")} == expected
    assert summary["params"]["model"] == {"source": "scratch", "max_length": 8, "truncate": True}
    for split in ("train", "dev"):
        pd.testing.assert_frame_equal(pd.read_parquet(out / f"{split}.parquet"),
                                      pd.read_parquet(tmp_path / f"{split}.parquet"))


def _check_positions(frame, spec, tokenizer, first_piece):
    positions = planted_token_positions(frame, spec, tokenizer)
    assert len(positions) == len(frame)
    ids = tokenizer(*[frame[f].tolist() for f in spec.text_fields])["input_ids"]
    for row, pair in enumerate(positions):
        if frame["gt_a_word"].isna().iloc[row]:
            assert pair is None  # an example no pair decides
            continue
        segments = [frame[f].iloc[row].split(" ") for f in spec.text_fields]
        for position, side in zip(pair, "ab", strict=True):
            segment = segments[frame[f"gt_{side}_segment"].iloc[row]]
            word = segment[frame[f"gt_{side}_word"].iloc[row]]
            assert tokenizer.convert_ids_to_tokens(ids[row][position]) == first_piece(word)
    assert any(pair is None for pair in positions) and any(positions)


@pytest.mark.parametrize("kind", synthetic.SYNTHETIC_KINDS)
def test_planted_positions_point_at_the_pair(tokenizer, kind):
    fields = ("premise", "hypothesis") if kind.startswith("pair") else ("sentence",)
    spec = TaskSpec("t", fields, tuple(map(str, range(synthetic.num_classes(kind)))))
    frame = synthetic.generate(kind, 50, seed=1, trigger_rate=0.3).rename(
        columns=dict(zip(["segment_0", "segment_1"], fields, strict=False)))
    _check_positions(frame, spec, tokenizer, first_piece=lambda word: word)


def test_planted_positions_with_a_subword_tokenizer(pair_task):
    # a character-level WordPiece vocabulary splits every word into several tokens
    chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    subword = build_tokenizer([*chars, *(f"##{c}" for c in chars)])
    spec = TaskSpec.from_config("t", pair_task)
    frame = synthetic.generate("pair3", 30, seed=2).rename(
        columns={"segment_0": "premise", "segment_1": "hypothesis"})
    _check_positions(frame, spec, subword, first_piece=lambda word: word[0])


def test_planted_positions_need_ground_truth(tokenizer):
    spec = TaskSpec.from_config("rte", _local_task("x", "y"))
    assert "no ground-truth columns" in _error_of(
        lambda: planted_token_positions(_good_frame(), spec, tokenizer))


# Real data: which rows become examples (attnlab.data.selection), and mixed tasks.

# A hub task whose dev split is held out of its train split (as config/real.yaml's are)
HELD_OUT = {"source": "hub", "hub": {"path": "some/reviews", "dev_split": None},
            "rows": {"dev": 10}, "text_fields": ["text"], "label_names": ["negative", "positive"]}


def _reviews(n: int) -> pd.DataFrame:
    """`n` reviews of two sentences each. The first sentence is the same in every other review
    (same label): which of the texts behind it is held out must not depend on the order of the
    source."""
    return pd.DataFrame({"text": [f"{'A fine film.' if i % 2 else f'Review {i} starts here.'} "
                                  f"It ends with {i} words!" for i in range(n)],
                         "label": [i % 2 for i in range(n)]})


def _read_held_out(tmp_path, source: pd.DataFrame, **task) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, dev) of HELD_OUT, changed by `task`, read as the workflow reads a hub task: from
    its downloaded train split, here `source`."""
    path = tmp_path / "train.parquet"
    source.to_parquet(path)
    _, train, dev, _ = read_task("reviews", {**HELD_OUT, **task}, 0, {"train": path})
    return train, dev


def test_a_held_out_dev_split_has_rows_dev_rows_none_of_them_in_train(tmp_path):
    source = _reviews(50)
    train, dev = _read_held_out(tmp_path, source, rows={"train": 30, "dev": 12})
    assert len(dev) == 12 and len(train) == 30
    assert not set(dev["source_row"]) & set(train["source_row"])
    # source_row is the example's row in the source split
    for split in (train, dev):
        assert (source["text"].iloc[split["source_row"]].to_numpy() == split["text"]).all()
    # rows.train null: the train split is every row not held out
    train, dev = _read_held_out(tmp_path, source, rows={"dev": 12})
    assert sorted([*train["source_row"], *dev["source_row"]]) == list(range(50))


def test_a_held_out_text_has_no_sentence_in_train(tmp_path):
    sentences = {"min_words": 1, "max_words": 40}
    train, dev = _read_held_out(tmp_path, _reviews(40), sentences=sentences, rows={"dev": 15})
    assert len(dev) == 15
    held_out = set(dev["source_row"])
    assert not held_out & set(train["source_row"])
    # both sentences of every other text are in train: the texts behind dev lose both of theirs
    assert len(train) == 2 * (40 - len(held_out))


@pytest.mark.parametrize("sentences", [None, {"min_words": 1, "max_words": 40}],
                         ids=["rows", "sentences"])
def test_the_draw_does_not_depend_on_the_order_of_the_source(tmp_path, sentences):
    source = _reviews(60)
    shuffled = source.sample(frac=1, random_state=3).reset_index(drop=True)
    task = {"rows": {"train": 20, "dev": 10}, "sentences": sentences}
    in_order = _read_held_out(tmp_path, source, **task)
    reordered = _read_held_out(tmp_path, shuffled, **task)
    for split, other in zip(in_order, reordered, strict=True):
        # the same examples in the same order; source_row numbers each source's own rows
        pd.testing.assert_frame_equal(split.drop(columns="source_row"),
                                      other.drop(columns="source_row"))
        assert (shuffled["label"].iloc[other["source_row"]].to_numpy() == other["label"]).all()


def test_sentences_are_cut_at_end_marks_without_html_breaks_and_keep_their_label():
    texts = pd.DataFrame({"text": [
        "A fine film.<br /><br />The cast is superb and warm! Did I like it? Yes.",
        "Dull and slow.<BR/>Nothing happens at all, really. The end.",
    ], "label": [1, 0]})
    cut = selection.sentences(selection.number_rows(texts), "text", min_words=3, max_words=5)
    # 6 words ("The cast ... warm!") is too many; 1 or 2 ("Yes.", "The end.") too few
    assert list(cut[["text", "label", "source_row"]].itertuples(index=False, name=None)) == [
        ("A fine film.", 1, 0), ("Did I like it?", 1, 0),
        ("Dull and slow.", 0, 1), ("Nothing happens at all, really.", 0, 1),
    ]


def test_a_closing_quote_or_bracket_stays_with_its_sentence():
    text = pd.DataFrame({"text": ['He said "go away now!" It was (as ever.) dull. The end.'],
                         "label": [0]})
    cut = selection.sentences(text, "text", min_words=1, max_words=40)
    assert cut["text"].tolist() == ['He said "go away now!"', "It was (as ever.) dull.",
                                    "The end."]


def test_a_mixed_task_labels_each_example_by_the_task_it_comes_from(tmp_path):
    # two one-field tasks with their own field names; critics' splits were themselves drawn
    # from a source (source_row), users' were not
    parts = {"critics": TaskSpec("critics", ("text",), ("neg", "pos")),
             "users": TaskSpec("users", ("review",), ("neg", "pos"))}
    frames = {"critics": pd.DataFrame({"text": ["a b c", "d e f"], "label": [0, 1],
                                       "source_row": [7, 3]}),
              "users": pd.DataFrame({"review": ["g h", "i j", "k l"], "label": [1, 1, 0]})}
    files = {}
    for name, frame in frames.items():
        field = parts[name].text_fields[0]
        for split in ("train", "dev"):
            files[f"{name}_{split}"] = tmp_path / f"{name}_{split}.parquet"
            frame.assign(**{field: frame[field] + f" {split}"}).to_parquet(files[f"{name}_{split}"])
    task = {"source": "mix", "mix": ["critics", "users"], "text_fields": ["sentence"],
            "label_names": ["critic", "user"]}
    _, train, dev, _ = read_task("who", task, 0, files, parts)
    for split, frame in (("train", train), ("dev", dev)):
        assert frame["sentence"].tolist() == [f"{text} {split}" for text in
                                              ["a b c", "d e f", "g h", "i j", "k l"]]
        assert frame["label"].tolist() == [0, 0, 1, 1, 1]
        assert frame["source_task"].tolist() == ["critics"] * 2 + ["users"] * 3
        assert frame["source_row"].tolist() == [7, 3, 0, 1, 2]
    # drawn: every example keeps the label of the task its text comes from
    _, train, _, _ = read_task("who", {**task, "rows": {"train": 3}}, 0, files, parts)
    assert len(train) == 3
    for row in train.itertuples():
        assert row.source_task == ["critics", "users"][row.label]
        field = parts[row.source_task].text_fields[0]
        assert row.sentence.removesuffix(" train") in set(frames[row.source_task][field])


PAIRS = {"source": "hub", "hub": {"path": "some/pairs"}, "text_fields": ["premise", "hypothesis"],
         "label_names": ["yes", "no"]}
MIXED = {"source": "mix", "mix": ["reviews", "imdb"], "text_fields": ["text"],
         "label_names": ["critic", "user"]}


@pytest.mark.parametrize("tasks, expected", [
    pytest.param({"reviews": {**HELD_OUT, "rows": {"train": 10}}},
                 "tasks.reviews.rows.dev: hub.dev_split is null", id="rows.dev missing"),
    pytest.param({"reviews": {k: v for k, v in HELD_OUT.items() if k != "rows"}},
                 "tasks.reviews.rows.dev: hub.dev_split is null", id="rows missing"),
    pytest.param({"reviews": HELD_OUT, "mixed": {**MIXED, "mix": ["reviews", "nope"]}},
                 "tasks.mixed.mix: 'nope' is not another task of this config (reviews)",
                 id="unknown task"),
    pytest.param({"reviews": HELD_OUT, "mixed": {**MIXED, "mix": ["reviews", "mixed"]}},
                 "tasks.mixed.mix: 'mixed' is not another task of this config (reviews)",
                 id="itself"),
    pytest.param({"reviews": HELD_OUT, "pairs": PAIRS,
                  "mixed": {**MIXED, "mix": ["reviews", "pairs"]}},
                 "tasks.mixed.mix: task pairs must have one text field", id="a pair task"),
    pytest.param({"reviews": HELD_OUT, "imdb": HELD_OUT,
                  "mixed": {**MIXED, "label_names": ["critic", "user", "bot"]}},
                 "tasks.mixed.label_names: one name per mixed task (2), got 3",
                 id="label_names"),
    pytest.param({"reviews": HELD_OUT, "imdb": HELD_OUT,
                  "mixed": {**MIXED, "text_fields": ["a", "b"]}},
                 "tasks.mixed.text_fields: a mixed task has one text field", id="two fields"),
    pytest.param({"pairs": {**PAIRS, "sentences": {"min_words": 2}}},
                 "tasks.pairs.sentences: cuts one text field into sentences; the task has 2",
                 id="sentences of pairs"),
    # a file that is there, but of a type no reader takes (this very file)
    pytest.param({"local": {"source": "local", "local": {"train": __file__, "dev": __file__},
                            "text_fields": ["text"], "label_names": ["a", "b"]}},
                 f"tasks.local.local.train: {__file__} is not a file type attnlab reads "
                 "(.parquet, .csv, .tsv, .json, .jsonl;", id="a file no reader takes"),
])
def test_a_real_data_setting_that_cannot_work_is_one_line_naming_the_key(tasks, expected):
    config = validate_config(copy.deepcopy({"name": "x", "tasks": tasks}))
    with pytest.raises(ConfigError) as info:
        check_config(config, None)  # as the dry run checks it, before the model is downloaded
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(expected), message


def test_the_real_config_passes_the_checks():
    # the settings the tests above break, as config/real.yaml uses them
    config = load_config(ROOT / "config" / "real.yaml")
    check_config(config, None)
    assert config["tasks"]["critic_or_user"]["mix"] == ["rotten_tomatoes", "imdb"]


def _prompts_task(tmp_path, targets: list[str], **task) -> dict:
    """A next-token task of local CSV files whose prompts are followed by `targets`."""
    rows = "".join(f"the capital is,{target}\n" for target in targets)
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,target\n" + rows)
    return {"kind": "next_token", "source": "local", "text_fields": ["text"],
            "local": {"train": str(tmp_path / "train.csv"), "dev": str(tmp_path / "dev.csv")},
            **task}


def test_a_next_token_target_of_several_tokens_is_refused_naming_its_row_and_tokens(tmp_path):
    task = _prompts_task(tmp_path, ["paris", "rome", "new york city", "oslo"])
    out = tmp_path / "out"
    job = _prepare_data(task, out, 16)
    # the scratch decoder's word-level tokenizer: three words, three tokens
    message = _error_of(lambda: prepare_data.run(job))
    assert message == (
        f"{tmp_path / 'train.csv'}: line 4: target 'new york city' is 3 tokens ['new', 'york', "
        "'city'], and only a target's first token is predicted (1 such rows); give one-token "
        "targets, or set tasks.syn_sst2.target_tokens: first to predict the first token of each")
    assert not out.exists()


def test_a_next_token_target_s_first_token_is_taken_when_asked_with_a_warning(tmp_path, caplog):
    task = _prompts_task(tmp_path, ["paris", "new york city", "los angeles"],
                         target_tokens="first")
    with caplog.at_level("WARNING", "attnlab"):
        prepare_data.run(_prepare_data(task, tmp_path / "out", 16))
    assert [m for m in caplog.messages if "more than one token" in m] == [
        f"task syn_sst2: {tmp_path / split}.csv: 2 of 3 targets are more than one token; the "
        "first token of each is predicted and attributed (tasks.syn_sst2.target_tokens: first)"
        for split in ("train", "dev")]
    assert len(pd.read_parquet(tmp_path / "out/dev.parquet")) == 3
