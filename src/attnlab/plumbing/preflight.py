"""What can be known wrong with a configuration before any job runs: checked by the dry run.

The schema (workflow/schemas/config.schema.yaml) checks each value on its own; `check_config`
checks what the schema cannot: values against each other, against the files they name and
against the checkpoint's config.json, so that no model is fine-tuned to be refused later.
Every problem is a `ConfigError` of one line naming the key. This module imports neither torch
nor transformers: Snakemake imports it whenever it builds the DAG.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.families import CLASSIFIER, DECODER, FAMILIES, SCRATCH_DEFAULT, names

WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
# A hub id: "name" or "owner/name" (also a path under resources/).
HUB_ID = r"[A-Za-z0-9][\w.-]*(?:/[\w.-]+)?"


@dataclass(frozen=True)
class ModelShape:
    """What the configuration's checks need to know of a model."""

    layers: int
    heads: int
    hidden: int
    positions: int | None  # the longest input it can take (None: no limit known)
    model_type: str = "bert"


def checkpoint_shape(path: str | Path) -> ModelShape:
    """The shape of the checkpoint directory `path` (as written by save_pretrained), read from
    its config.json; refused in one line unless it is a model of a supported family."""
    config_file = Path(path, "config.json")
    if not config_file.is_file():
        raise ConfigError(f"model.pretrained: {path} is not a model directory (no config.json)")
    try:
        cfg = json.loads(config_file.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ConfigError(f"model.pretrained: {config_file} is not valid JSON ({err})") from None
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        raise ConfigError(
            f"model.pretrained: {path} is a {model_type!r} model, a family whose attention "
            f"cannot be intervened on; supported families: {', '.join(FAMILIES)}"
        )
    if not any(next(Path(path).glob(pattern), None) for pattern in WEIGHTS):
        raise ConfigError(f"model.pretrained: {path} has no weights (model.safetensors or "
                          "pytorch_model.bin)")
    for weights in sorted(Path(path).glob("*.safetensors")):
        damage = safetensors_damage(weights)
        if damage:
            raise ConfigError(f"model.pretrained: {weights} is damaged ({damage}); download or "
                              "save the checkpoint again")
    sizes = FAMILIES[model_type].sizes
    keys = (sizes.layers, sizes.heads, sizes.hidden)
    missing = [key for key in keys if not isinstance(cfg.get(key), int)]
    if missing:
        raise ConfigError(f"model.pretrained: {config_file} has no {', '.join(missing)}")
    layers, heads, hidden = (cfg[key] for key in keys)
    positions = cfg.get(sizes.positions)
    return ModelShape(layers, heads, hidden, positions, model_type)


def safetensors_damage(path: Path) -> str | None:
    """What is wrong with the safetensors file `path`, read from its header without loading the
    tensors (None when nothing is): a file cut short by an interrupted download or copy would
    otherwise fail only when a job loads it, without naming it."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than a header"
        header_size = int.from_bytes(head, "little")
        try:
            header = json.loads(f.read(min(header_size, size)))
            ends = [tensor["data_offsets"][1] for key, tensor in header.items()
                    if key != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "its header is not readable"
    expected = 8 + header_size + max(ends, default=0)
    if size < expected:
        return f"{size} bytes where its header describes {expected}"
    return None


def model_shape(model: dict[str, Any], pretrained: str | None) -> ModelShape | None:
    """The shape of the configured model: from model.scratch, or from the local checkpoint
    `pretrained`; None while a hub checkpoint is not downloaded yet."""
    if model["source"] == "scratch":
        size = model["scratch"]
        if size["hidden"] % size["heads"]:
            raise ConfigError(f"model.scratch.hidden: {size['hidden']} is not a multiple of "
                              f"model.scratch.heads ({size['heads']})")
        return ModelShape(size["layers"], size["heads"], size["hidden"], model["max_length"])
    if pretrained is None or not Path(pretrained).is_dir():
        return None
    return checkpoint_shape(pretrained)


def _check_layers(key: str, layers: list[int], shape: ModelShape) -> None:
    for layer in layers:
        if not -shape.layers <= layer < shape.layers:
            raise ConfigError(f"{key}: layer {layer} is out of range; the model has "
                              f"{shape.layers} layers (0..{shape.layers - 1})")


def _check_tasks(config: dict[str, Any]) -> None:
    for name, task in config["tasks"].items():
        if task["source"] == "hub" and not re.fullmatch(HUB_ID, task["hub"]["path"]):
            raise ConfigError(f"tasks.{name}.hub.path: {task['hub']['path']!r} is not a hub "
                              "dataset id (like nyu-mll/glue)")
        if task["source"] == "local":
            for split in ("train", "dev"):
                if not Path(task["local"][split]).is_file():
                    raise ConfigError(f"tasks.{name}.local.{split}: no file "
                                      f"{task['local'][split]}")
            try:
                codecs.lookup(task["local"]["encoding"])
            except LookupError:
                raise ConfigError(f"tasks.{name}.local.encoding: {task['local']['encoding']!r} is "
                                  "not an encoding Python knows (e.g. utf-8, latin-1, cp1252, "
                                  "utf-16)") from None
        if task["source"] == "hub" and task["hub"]["dev_split"] is None and not (
                task["rows"] or {}).get("dev"):
            raise ConfigError(f"tasks.{name}.rows.dev: hub.dev_split is null, so the dev split "
                              "is held out from the train split: say how many rows")
        single = len(task["text_fields"]) == 1
        if task["sentences"] and not single:
            raise ConfigError(f"tasks.{name}.sentences: cuts one text field into sentences; the "
                              f"task has {len(task['text_fields'])}")
        if task["source"] == "mix":
            _check_mix(config, name, task)


def _check_mix(config: dict[str, Any], name: str, task: dict[str, Any]) -> None:
    tasks = config["tasks"]
    for part in task["mix"]:
        if part not in tasks or part == name:
            others = ", ".join(t for t in tasks if t != name)
            raise ConfigError(f"tasks.{name}.mix: {part!r} is not another task of this config "
                              f"({others})")
        if len(tasks[part]["text_fields"]) != 1 or tasks[part]["source"] == "mix":
            raise ConfigError(f"tasks.{name}.mix: task {part} must have one text field and "
                              "its own source (not mix)")
    if len(task["text_fields"]) != 1:
        raise ConfigError(f"tasks.{name}.text_fields: a mixed task has one text field")
    if len(task["label_names"]) != len(task["mix"]):
        raise ConfigError(f"tasks.{name}.label_names: one name per mixed task "
                          f"({len(task['mix'])}), got {len(task['label_names'])}")


def task_kind(config: dict[str, Any]) -> str:
    """The kind of the configuration's tasks (classification or next_token), one for all."""
    kinds = {name: task.get("kind", "classification") for name, task in config["tasks"].items()}
    if len(set(kinds.values())) > 1:
        raise ConfigError("tasks: the tasks are of different kinds ("
                          + ", ".join(f"{name}: {kind}" for name, kind in kinds.items())
                          + "); one configuration's tasks are all classification or all "
                          "next_token")
    return next(iter(kinds.values()))


def _check_kind(config: dict[str, Any]) -> None:
    """A next_token configuration needs a decoder, and a classification one an encoder; it
    runs no stage that compares tasks, its trees are normalised by the layer's maximum, and
    its prompts are not truncated."""
    decoder = task_kind(config) == "next_token"
    model = config["model"]
    family = model["scratch"].get("family", SCRATCH_DEFAULT)
    fitting = names(DECODER if decoder else CLASSIFIER, scratch=True)
    if family not in names(scratch=True):
        raise ConfigError(f"model.scratch.family: {family!r} is not a family built from "
                          f"scratch ({', '.join(names(scratch=True))})")
    if model["source"] == "scratch" and family not in fitting:
        raise ConfigError(f"model.scratch.family: {family!r} cannot learn "
                          f"{task_kind(config)} tasks; use {' or '.join(fitting)}")
    # a prompt cut short would lose the query (its last token) or shift every planted position
    if decoder and model["truncate"]:
        raise ConfigError("model.truncate: a next_token task's prompts are never truncated; "
                          "raise model.max_length instead")
    if decoder and config["trees"]["normalise"] != "layer":
        raise ConfigError(f"trees.normalise: {config['trees']['normalise']!r} leaves out a "
                          "classifier's [CLS] row; a decoder's trees (next_token tasks) take "
                          "'layer'")
    for key in ("similar_pairs", "dissimilar_pairs"):
        if decoder and config["heads"][key]:
            raise ConfigError(f"heads.{key}: the cross-task correlation of head importance is "
                              "not run for next_token tasks; leave it empty")
    for name, task in config["tasks"].items():
        if decoder and task["source"] not in ("synthetic", "local"):
            raise ConfigError(f"tasks.{name}.source: {task['source']!r}; a next_token task's "
                              "data is synthetic (induction) or local")
        induction = task["source"] == "synthetic" and task["synthetic"]["kind"] == "induction"
        if task["source"] == "synthetic" and induction != decoder:
            raise ConfigError(f"tasks.{name}.synthetic.kind: {task['synthetic']['kind']!r} "
                              f"does not make {task_kind(config)} tasks (induction makes "
                              "next_token tasks, the others classification tasks)")


def attributed_idx(config: dict[str, Any], task: dict[str, Any]) -> range | None:
    """The idx values of a task's attributed dev examples, where the config alone says them
    (synthetic tasks: idx 0..n_dev-1); None for data read from files."""
    if task["source"] != "synthetic":
        return None
    limit = config["attribution"]["max_examples"]
    return range(min(task["synthetic"]["n_dev"], limit or task["synthetic"]["n_dev"]))


def check_config(config: dict[str, Any], pretrained: str | None) -> None:
    """Check what the schema cannot (see the module's docstring). `config` has the schema's
    defaults filled in; `pretrained` is the local directory of model.pretrained (None for a
    scratch model). Raises `ConfigError`."""
    _check_tasks(config)
    _check_kind(config)
    tasks = list(config["tasks"])
    heads = config["heads"]
    # task_correlation, part of every run, correlates the attribution importance
    if "attribution" not in heads["methods"]:
        raise ConfigError(f"heads.methods: {heads['methods']} lacks 'attribution', which the "
                          "cross-task correlation of every run needs")
    for pair in heads["similar_pairs"] + heads["dissimilar_pairs"]:
        if not set(pair) <= set(tasks):
            raise ConfigError(f"heads: pair {pair} names a task that is not in tasks "
                              f"({', '.join(tasks)})")
    if config["model"]["pretrain"]["epochs"] and config["model"]["source"] != "scratch":
        raise ConfigError(f"model.pretrain.epochs: pre-training is for scratch models only; "
                          f"model.source is {config['model']['source']!r}, which starts from "
                          "model.pretrained")
    if config["controls"] and config["model"]["source"] == "finetuned":
        raise ConfigError(f"controls: {config['controls']} compare with the model fine-tuning "
                          "starts from; model.source finetuned is used as published, with no "
                          "untrained model of ours")
    trees, attribution = config["trees"], config["attribution"]
    # the adaptive rule's first panels take 3 gradient evaluations per scan interval at most
    if attribution["max_steps"] < 3 * attribution["scan_steps"]:
        raise ConfigError(f"attribution.max_steps: {attribution['max_steps']} is below 3 x "
                          f"attribution.scan_steps ({attribution['scan_steps']})")
    # the dumps keep edges down to attribution.edge_min_fraction of each layer's maximum only
    if trees["tau"] < attribution["edge_min_fraction"]:
        raise ConfigError(f"trees.tau: {trees['tau']} is below attribution.edge_min_fraction "
                          f"({attribution['edge_min_fraction']}), the smallest edge the dumps "
                          "keep")
    for name, task in config["tasks"].items():
        available = attributed_idx(config, task)
        missing = sorted(set(trees["example_idx"]) - set(available or []))
        if available is not None and missing:
            raise ConfigError(f"trees.example_idx: {missing} are not attributed dev examples of "
                              f"task {name} (idx {available.start}..{available.stop - 1})")

    shape = model_shape(config["model"], pretrained)
    if shape is None:
        return
    decoder = task_kind(config) == "next_token"
    if config["model"]["source"] != "scratch" and FAMILIES[shape.model_type].causal != decoder:
        fitting = names(DECODER if decoder else CLASSIFIER)
        raise ConfigError(f"model.pretrained: {pretrained} is a {shape.model_type!r} model, "
                          f"which cannot do {task_kind(config)} tasks; they need "
                          f"{'a decoder' if decoder else 'an encoder'} ({', '.join(fitting)})")
    if shape.positions is not None and config["model"]["max_length"] > shape.positions:
        raise ConfigError(f"model.max_length: {config['model']['max_length']} is more than the "
                          f"{shape.positions} positions the model has")
    if trees["heatmap_layer"] is not None:
        _check_layers("trees.heatmap_layer", [trees["heatmap_layer"]], shape)
    _check_layers("explanation.adversarial_attention.layers",
                  config["explanation"]["adversarial_attention"]["layers"] or [], shape)
