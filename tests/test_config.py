"""The config schema: the default config is valid, defaults are filled, mistakes are named.

Errors are checked through the real `snakemake -n` command line, which is what a user sees.
"""

from __future__ import annotations

import copy
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from attnlab.data.tasks import read_local
from attnlab.plumbing.config import SCHEMA, validate_config
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.preflight import (
    SAMPLE_OF,
    SAMPLES,
    Rows,
    check_config,
    check_samples,
    hub_file,
    local_rows,
    sample_split,
    setting,
    split_rows,
    undownloaded,
)

ROOT = Path(__file__).resolve().parents[1]


def default_config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def dry_run(config: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(configfile)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


def test_the_config_is_checked_without_torch():
    """The workflow checks the config when it plans its jobs: reading the method registry for
    the schema's names (attnlab.plumbing.config.with_methods) imports no torch, which would
    add seconds to every plan."""
    check = ("import sys, yaml; from attnlab.plumbing.config import validate_config; "
             f"validate_config(yaml.safe_load(open({str(ROOT / 'config.yaml')!r}))); "
             "sys.exit('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert result.returncode == 0, f"checking the config imports torch {result.stderr}"


def test_default_config_validates_and_gets_defaults():
    config = default_config()
    validate_config(config)  # as the workflow does: the defaults are filled in
    assert config["attribution"]["edge_min_fraction"] == 0.1
    assert config["attribution"]["max_examples"] is None
    assert config["model"]["truncate"] is False
    assert config["tasks"]["syn_rte"]["synthetic"]["trigger_rate"] == 0.25
    # a task's finetune override gets no defaults: unset keys come from the top level
    assert "finetune" not in config["tasks"]["syn_rte"]


def test_defaults_fill_a_minimal_config():
    config = {"name": "x", "tasks": {"t": {
        "source": "synthetic", "synthetic": {"kind": "single2"},
        "text_fields": ["sentence"], "label_names": ["neg", "pos"],
    }}}
    validate_config(config)
    assert config["seed"] == 0 and config["device"] == "auto" and config["precision"] == "fp32"
    assert config["model"]["scratch"] == {
        "layers": 4, "heads": 4, "hidden": 64, "intermediate": 128, "dropout": 0.1
    }
    assert config["finetune"]["learning_rate"] == 2e-5
    assert config["attribution"]["quadrature"] == "adaptive"
    assert config["attribution"]["tolerance"] == 1e-3
    assert config["attribution"]["shards"] == 1
    assert config["attribution"]["batch_size"] == "auto"


def _objects(schema: dict, where: str = "config"):
    """Every object schema in `schema` with the path it describes."""
    if schema.get("type") == "object":
        yield where, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _objects(sub, f"{where}.{key}")
    for key, sub in schema.get("$defs", {}).items():
        yield from _objects(sub, f"$defs.{key}")


def test_every_key_is_documented_and_unknown_keys_are_refused():
    schema = yaml.safe_load(SCHEMA.read_text())
    for where, obj in _objects(schema):
        assert obj.get("additionalProperties") is False or where == "config.tasks", where
        for key, sub in obj.get("properties", {}).items():
            assert "description" in sub or "$ref" in sub, f"{where}.{key} has no description"


def test_default_config_dry_runs(tmp_path):
    result = dry_run(default_config(), tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "section, key, value, expected",
    [
        ("attribution", "quadrature", "simpson",
         "config error at attribution.quadrature: 'simpson' is not one of "
         "['adaptive', 'riemann_right', 'riemann_left', 'gauss_legendre']"),
        ("attribution", "quadratur", "riemann_left",
         "config error at attribution: unknown key 'quadratur' (allowed here: batch_size, "
         "edge_min_fraction, keep_full, max_edges_per_layer, max_examples, max_steps, "
         "quadrature, scan_steps, score, shards, steps, study_examples, study_panels, target, "
         "tolerance, top_pairs)"),
        ("attribution", "edge_min_fraction", 1.5,
         "config error at attribution.edge_min_fraction: 1.5 is out of range "
         "(allowed: > 0 and < 1)"),
        ("attribution", "batch_size", "fast",
         "config error at attribution.batch_size: 'fast' does not match '^auto$'"),
        ("finetune", "stop_loss", 0,
         "config error at finetune.stop_loss: 0 is out of range (allowed: > 0)"),
        ("finetune", "learning_rate", "2e-5",
         "config error at finetune.learning_rate: '2e-5' is not of type 'number'"),
        (None, "device", "gpu",
         "config error at device: 'gpu' is not one of ['auto', 'cpu', 'cuda']"),
        (None, "precision", "fp16",
         "config error at precision: 'fp16' is not one of ['fp32', 'tf32', 'bf16']"),
    ],
)
def test_config_error_names_key_and_allowed_values(tmp_path, section, key, value, expected):
    config = copy.deepcopy(default_config())
    (config[section] if section else config)[key] = value
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    assert expected in result.stderr + result.stdout


@pytest.mark.parametrize("change, expected", [
    # two runs of one seed would be judged as two draws
    ({"seeds": [1, 1]}, "seeds: [1, 1] has non-unique elements"),
    ({"heads": {"methods": ["attribution", "tayler"]}},
     "heads.methods.1: 'tayler' is not one of ['attribution', 'attention', 'taylor', "),
    ({"interaction_methods": {"methods": ["rolout"]}},
     "interaction_methods.methods.0: 'rolout' is not one of ['attention', 'attattr', "),
])
def test_a_repeated_seed_or_an_unknown_method_is_one_line_naming_the_key(change, expected):
    config = copy.deepcopy(default_config())
    for section, value in change.items():
        config[section] = {**config.get(section, {}), **value} if isinstance(value, dict) else value
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_task_source_needs_its_settings(tmp_path):
    config = default_config()
    config["tasks"]["syn_sst2"]["source"] = "hub"
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    expected = "config error at tasks.syn_sst2: 'hub' is a required property"
    assert expected in result.stdout + result.stderr


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"model": {"source": "pretrained", "pretrained": "../no/such/dir"}},
         "config error at model.pretrained: '../no/such/dir' is neither a directory nor a hub "
         "model id"),
        ({"tasks": {"t": {"source": "local", "local": {"train": "no.csv", "dev": "config.yaml"},
                          "text_fields": ["sentence"], "label_names": ["a", "b"]}}},
         "config error at tasks.t.local.train: no file no.csv"),
        ({"tasks": {"t": {"source": "hub", "hub": {"path": "/abs/glue"},
                          "text_fields": ["sentence"], "label_names": ["a", "b"]}}},
         "config error at tasks.t.hub.path: '/abs/glue' is not a hub dataset id"),
        # a shared masked-LM start is built for scratch models only
        ({"model": {"source": "pretrained", "pretrained": "bert-base-cased",
                    "pretrain": {"epochs": 2}}},
         "config error at model.pretrain.epochs: pre-training is for scratch models only"),
        ({"report": {"papers": ["nosuch"]}},
         "config error at report.papers: no statements file for paper 'nosuch' (known: "),
        # the untrained control is the model fine-tuning starts from: none for a published one
        ({"model": {"source": "finetuned", "pretrained": "textattack/bert-base-uncased-SST-2"},
          "controls": ["untrained"]},
         "config error at controls: ['untrained'] compare with the model fine-tuning starts "
         "from"),
    ],
)
def test_what_a_config_refers_to_is_checked_in_the_dry_run(tmp_path, change, expected):
    config = {**default_config(), **change}
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr


# --- the stages' samples against the splits they are drawn from (preflight.check_samples) ---

N_TRAIN, N_DEV, N_ATTRIBUTED = 30, 12, 10


def _sampled_config(**sizes: dict) -> dict:
    """A one-task synthetic config (task t) of N_TRAIN train and N_DEV dev examples, of which
    N_ATTRIBUTED are attributed, with the settings `sizes` (dotted key: value)."""
    config = {"name": "x", "tasks": {"t": {
        "source": "synthetic", "synthetic": {"kind": "single2", "n_train": N_TRAIN,
                                             "n_dev": N_DEV},
        "text_fields": ["sentence"], "label_names": ["neg", "pos"]}}}
    validate_config(config)
    # every sample of one example, which each split holds, but those of `sizes`
    samples = {**dict.fromkeys(SAMPLE_OF, 1), "attribution.max_examples": N_ATTRIBUTED}
    for key, value in {**samples, **sizes}.items():
        *sections, last = key.split(".")
        setting(config, ".".join(sections))[last] = value
    return config


def _examples_keys(schema: dict, where: str = "") -> list[str]:
    """The dotted keys of the schema's sections (not a task's) that size a sample of examples."""
    keys = []
    for key, sub in schema.get("properties", {}).items():
        path = f"{where}{key}"
        if key == "examples" or key.endswith("_examples"):
            keys.append(path)
        keys += _examples_keys(sub, f"{path}.")
    return keys


def test_every_setting_of_a_sample_is_in_the_table_of_samples():
    # a new `*_examples` key without its row (and split) in SAMPLES would go unchecked
    assert sorted(_examples_keys(yaml.safe_load(SCHEMA.read_text()))) == sorted(SAMPLE_OF)


SPLIT_SIZES = {"train": N_TRAIN, "dev": N_DEV, "attributed": N_ATTRIBUTED}


# the samples a stage takes the first this many examples of, all where the split has fewer (not
# one that another follows in the same split: there, the later one is refused)
TAKING = [s for s in SAMPLES if s.after is None and not any(
    later.after == s.key and later.split == s.split for later in SAMPLES)]


@pytest.mark.parametrize("sample", TAKING, ids=lambda s: s.key)
def test_a_sample_larger_than_its_split_is_one_warning_and_one_that_fits_none(sample):
    split = sample_split(_sampled_config(), sample)
    n = SPLIT_SIZES[split]
    # attribution.max_examples is set to the attributed examples' N_ATTRIBUTED: dev has more
    fits = _sampled_config(**{sample.key: n})
    assert check_samples(fits, {sample.rule: ["t"]}) == []
    more = _sampled_config(**{sample.key: n + 1})
    kind = {"train": "train examples", "dev": "dev examples",
            "attributed": "attributed dev examples"}[split]
    assert check_samples(more, {sample.rule: ["t"]}) == [
        f"warning: task t has {n} {kind}, fewer than {sample.key} = {n + 1} asks for: it takes "
        "all of them"]
    # a rule that does not run on the task draws no sample of it
    assert check_samples(more, {sample.rule: []}) == []


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.after], ids=lambda s: s.key)
def test_a_sample_that_finds_too_few_examples_after_another_is_refused(sample):
    before = SAMPLE_OF[sample.after]
    # the first sample takes what it asks for, or all of its split (heads: the attributed ones)
    taken = min(8, SPLIT_SIZES[before.split])
    fits = _sampled_config(**{before.key: 8, sample.key: N_DEV - taken})
    assert check_samples(fits, {sample.rule: ["t"]}) == []
    short = _sampled_config(**{before.key: 8, sample.key: N_DEV - taken + 1})
    with pytest.raises(ConfigError, match=re.escape(
            f"{before.key} = 8 takes {taken} of the {N_DEV} dev examples of task t, which leaves "
            f"{N_DEV - taken} {sample.leaves}, fewer than {sample.key} = {N_DEV - taken + 1}")):
        check_samples(short, {sample.rule: ["t"]})


def _local_task(train: str, dev: str, **task) -> dict:
    config = {"name": "x", "tasks": {"t": {
        "source": "local", "local": {"train": train, "dev": dev},
        "text_fields": ["review"], "label_names": ["neg", "pos"], **task}}}
    validate_config(config)
    return config


def test_the_rows_of_local_files_are_counted_as_their_reader_reads_them(tmp_path):
    # a quoted field over two lines is one row, a blank line none; TSV and JSON lines are
    # counted by their non-blank lines, Parquet from its metadata, compressed text decompressed
    csv_file = tmp_path / "dev.csv"
    csv_file.write_text('review,label\n"two\nlines",1\n\nplain,0\nthird,1\n')
    tsv_file = tmp_path / "train.tsv"
    tsv_file.write_text("review\tlabel\n" + "a \"b\tc\n" * 5)
    jsonl = tmp_path / "train.jsonl.gz"
    with gzip.open(jsonl, "wt") as f:
        f.write('{"review": "a", "label": 0}\n\n{"review": "b", "label": 1}\n')
    parquet = tmp_path / "train.parquet"
    pd.DataFrame({"review": ["a"] * 7, "label": [0] * 7}).to_parquet(parquet)
    for path, n in ((csv_file, 3), (tsv_file, 5), (jsonl, 2), (parquet, 7)):
        assert local_rows(path, "utf-8") == n, path
        config = _local_task(str(path), str(csv_file))
        assert split_rows(config, "t", "train") == Rows(n, exact=True)
        assert len(read_local(str(path), "utf-8", "k")[0]) == n
    # a sample of rows.dev rows of a file of 3: its 3; of a file not read before the jobs
    # (texts cut into sentences): at most rows.dev
    assert split_rows(_local_task(str(parquet), str(csv_file), rows={"dev": 2}), "t",
                      "dev") == Rows(2, exact=True)
    cut = _local_task(str(parquet), str(csv_file), rows={"dev": 40}, sentences={})
    assert split_rows(cut, "t", "dev") == Rows(40, exact=False)
    assert split_rows(cut, "t", "train") is None


def test_a_sample_of_a_synthetic_split_is_counted_and_a_next_token_task_s_prompts_are_not():
    config = _sampled_config()
    config["tasks"]["t"]["rows"] = {"dev": 5, "train": 100}
    assert split_rows(config, "t", "dev") == Rows(5, exact=True)
    assert split_rows(config, "t", "train") == Rows(N_TRAIN, exact=True)
    # a next-token task's prompts are taken as they are (rows does not sample them)
    config["tasks"]["t"].update(kind="next_token", synthetic={"kind": "induction",
                                                              "n_train": 9, "n_dev": 7})
    assert split_rows(config, "t", "dev") == Rows(7, exact=True)


def test_a_held_out_dev_split_of_a_downloaded_hub_split_is_counted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {"name": "x", "tasks": {"t": {
        "source": "hub", "hub": {"path": "o/d", "dev_split": None}, "rows": {"dev": 15},
        "text_fields": ["review"], "label_names": ["neg", "pos"]}}}
    validate_config(config)
    assert split_rows(config, "t", "dev") == Rows(15, exact=False)  # not downloaded yet
    path = Path(hub_file(config["tasks"]["t"]["hub"], "train"))
    # make run downloads it before it plans the run: the one split, the dev examples held out
    assert undownloaded(config) == [str(path)]
    path.parent.mkdir(parents=True)
    pd.DataFrame({"review": ["a"] * 40, "label": [0] * 40}).to_parquet(path)
    assert undownloaded(config) == []
    assert split_rows(config, "t", "dev") == Rows(15, exact=True)
    assert split_rows(config, "t", "train") == Rows(25, exact=True)


def test_a_bound_on_a_split_refuses_what_no_split_within_it_allows():
    # rows.dev: 40 of a hub split not downloaded: at most 40 dev examples, too few for the
    # default 200 + 50 of the heads, whatever the split holds
    config = {"name": "x", "tasks": {"t": {
        "source": "hub", "hub": {"path": "no/such"}, "rows": {"dev": 40},
        "text_fields": ["review"], "label_names": ["neg", "pos"]}}}
    validate_config(config)
    with pytest.raises(ConfigError, match="takes 40 of the 40 dev examples of task t"):
        check_samples(config, {"head_importance": ["t"]})
    config["tasks"]["t"]["rows"] = None  # nothing bounds it: left to the stage
    assert check_samples(config, {"head_importance": ["t"]}) == []


@pytest.mark.parametrize("task, expected", [
    ({"synthetic": {"kind": "pair3"}, "text_fields": ["a", "b"], "label_names": ["x", "y"]},
     "config error at tasks.syn_sst2.label_names: synthetic kind 'pair3' has 3 classes, and "
     "label_names names 2"),
    ({"synthetic": {"kind": "pair2"}, "text_fields": ["a"], "label_names": ["x", "y"]},
     "config error at tasks.syn_sst2.text_fields: synthetic kind 'pair2' has 2 text "
     "segment(s), and text_fields names 1"),
])
def test_what_a_synthetic_kind_fixes_is_checked_in_the_dry_run(tmp_path, task, expected):
    config = default_config()
    config["tasks"]["syn_sst2"].update(task)
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr


def test_target_tokens_is_refused_where_a_task_has_no_targets_of_its_own():
    # keep_full: rule induction reads the full matrices of a next_token configuration's dumps
    config = {"name": "x", "model": {"scratch": {"family": "gpt2"}}, "tasks": {"t": {
        "kind": "next_token", "source": "synthetic", "synthetic": {"kind": "induction"},
        "text_fields": ["text"], "target_tokens": "first"}}, "attribution": {"keep_full": True}}
    validate_config(config)
    with pytest.raises(ConfigError, match=r"^tasks.t.target_tokens: says how a next_token "
                                          r"task's own targets \(source local"):
        check_config(config, None)
    del config["tasks"]["t"]["target_tokens"]
    check_config(config, None)
