import json

import numpy as np
import pandas as pd
import pytest
import torch

from attnlab.data import synthetic
from attnlab.data.tasks import (
    DataError,
    TaskSpec,
    load_split,
    planted_token_positions,
    prepare_task,
)
from attnlab.data.tokenization import build_tokenizer
from attnlab.engine.examples import encode
from attnlab.job import Job
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


BAD_FRAMES = {
    "missing column 'sentence2' (columns are sentence1, label, idx)":
        _good_frame().drop(columns="sentence2"),
    "row 3 has label 2; labels must be integers in 0..1":
        _good_frame().assign(label=[0, 1, 0, 2, 0, 1]),
    "row 0 has label 'yes'": _good_frame().assign(label=["yes"] * 6),
    "row 0 has label 0.5": _good_frame().assign(label=0.5),
    "row 2 has label nan": _good_frame().assign(label=[0, 1, None, 1, 0, 1]),
    "column 'sentence1' row 1 is missing, not text":
        _good_frame().assign(sentence1=["a", None, "b", "c", "d", "e"]),
    "column 'sentence2' row 0 is 5, not text": _good_frame().assign(sentence2=5),
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
    ("broken.json", "{not json", "broken.json: cannot read as json (ArrowInvalid: JSON parse"),
    ("split.txt", "a", "split.txt: unknown file type '.txt'"),
])
def test_unreadable_local_file_is_one_line_error(tmp_path, name, content, problem):
    if content is not None:
        (tmp_path / name).write_text(content)
    task = _local_task(tmp_path / name, tmp_path / name)
    out = tmp_path / "out"
    message = _error_of(lambda: prepare_task("rte", task, 0, out / "a", out / "b"))
    assert problem in message
    assert not out.exists()


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
               settings={"task": task, "seed": 0, "model": {
                   "source": "scratch", "max_length": max_length, "truncate": truncate}},
               wildcards={"task": "syn_sst2"})


def test_prepare_data_refuses_an_example_too_long_for_the_model_before_writing(tmp_path,
                                                                                single_task):
    out = tmp_path / "out"
    message = _error_of(lambda: prepare_data.run(_prepare_data(single_task, out, 8)))
    assert "task syn_sst2: example idx=" in message and "model.max_length=8" in message
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


