"""The config schema: the default config is valid, defaults are filled, mistakes are named.

Errors are checked through the real `snakemake -n` command line, which is what a user sees.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnlab.plumbing.config import SCHEMA, validate_config
from attnlab.plumbing.errors import ConfigError

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
