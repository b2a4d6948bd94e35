"""One row per model family (attnlab.plumbing.families) that every layer reads: the engine
resolves every row, and a family of an existing kind needs its row alone."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import DEFAULT_CONFIG
from tiny_models import CAUSAL_FAMILIES, VOCAB, tiny_batch, tiny_causal_lm, tiny_classifier
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
)

from attnlab.data.tasks import TaskSpec
from attnlab.data.tokenization import build_tokenizer
from attnlab.engine import models, training
from attnlab.engine.attribution import attribute
from attnlab.engine.batch_size import EncoderShape
from attnlab.engine.intervention import LAYER_ATTRIBUTE
from attnlab.plumbing.config import validate_config
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.families import FAMILIES
from attnlab.plumbing.preflight import check_config, checkpoint_shape

ROOT = Path(__file__).resolve().parents[1]


def tiny_model(name: str):
    return (tiny_causal_lm(name, dtype=torch.float32) if name in CAUSAL_FAMILIES
            else tiny_classifier(name))


@pytest.mark.parametrize("name", FAMILIES)
def test_the_engine_and_the_dry_run_resolve_every_row(name, tmp_path):
    """Every part a row names is where it says, in a model of its family: the layers and
    their attention, the embedding and head functions, W_O and the output layer; its size keys
    give the dry run's shape and the memory estimate's."""
    family = FAMILIES[name]
    model = models.prepare_model(tiny_model(name))
    assert models.family_of(model) is family
    stack = models.layer_stack(model)
    assert all(getattr(models._get(layer, family.layout.attention), LAYER_ATTRIBUTE) == index
               for index, layer in enumerate(stack))
    assert family.embeddings in models.EMBEDDINGS and family.head in (None, *models.HEADS)
    assert models.output_projection(model, 0)[0].shape[0] == model.config.hidden_size
    output_rows = models._get(model, family.output).weight.shape[0]
    assert output_rows == (VOCAB if family.causal else model.config.num_labels)
    batch = (tiny_batch(name) if not family.causal
             else {"input_ids": torch.randint(3, VOCAB, (2, 5)),
                   "attention_mask": torch.ones(2, 5, dtype=torch.long)})
    with torch.no_grad():
        hidden = models.embed(model, batch)
        assert hidden.shape == (*batch["input_ids"].shape, model.config.hidden_size)
        if family.split:  # the head reads the last layer as the whole model does
            layers = models.layer_inputs(model, hidden, batch["attention_mask"])
            split = models.classify(model, models.run_layers(model, hidden, layers, 0),
                                    batch["attention_mask"])
            assert torch.allclose(split, models.logits(model, batch), atol=1e-5)
    model.save_pretrained(tmp_path)
    shape = checkpoint_shape(tmp_path)
    assert (shape.model_type, shape.layers, shape.heads, shape.hidden) == (
        name, len(stack), model.config.num_attention_heads, model.config.hidden_size)
    memory = EncoderShape.of(model.config)
    assert (memory.heads, memory.hidden) == (shape.heads, shape.hidden)
    assert memory.layers >= shape.layers


# A family of an existing kind under a model_type of its own: BERT, registered with
# transformers under another name, and its row a copy of BERT's.
class DummyConfig(BertConfig):
    model_type = "dummy_bert"


class DummyForSequenceClassification(BertForSequenceClassification):
    config_class = DummyConfig


AutoConfig.register(DummyConfig.model_type, DummyConfig, exist_ok=True)
AutoModelForSequenceClassification.register(
    DummyConfig, DummyForSequenceClassification, exist_ok=True)
DUMMY_ROW = replace(FAMILIES["bert"], name=DummyConfig.model_type)
WORDS = ["good", "bad", "film", "plot", "great", "dull"]
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 48, "num_labels": 2, "initializer_range": 0.1}


def design_bullet() -> str:
    """docs/design.md's "Where to add things" bullet of a model family."""
    text = (ROOT / "docs" / "design.md").read_text()
    return re.search(r"\* \*\*A model family\.\*\*(.*?)(?=\n\S|\n\* )", text, re.S).group(1)


def test_a_family_of_an_existing_kind_needs_its_row_alone(tmp_path, monkeypatch):
    """The places docs/design.md names for a family are the table's row (and, for new parts,
    the engine's functions): with the row of a copy of BERT added to the table, and no other
    change, the dry run, the scratch builder, fine-tuning, the memory estimate and the engine
    all take it, and it attributes as BERT does. Without the row each refuses it: a list of
    families kept anywhere else would refuse it with the row too."""
    bullet = design_bullet()
    assert "`plumbing/families.py`" in bullet and "`engine/models.py`" in bullet
    tokenizer = build_tokenizer(WORDS)
    torch.manual_seed(0)
    model = DummyForSequenceClassification(DummyConfig(vocab_size=len(tokenizer), **SIZES))
    checkpoint = tmp_path / "dummy"
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    pretrained = copy.deepcopy(DEFAULT_CONFIG)
    pretrained["model"] |= {"source": "pretrained", "pretrained": str(checkpoint)}
    scratch = copy.deepcopy(DEFAULT_CONFIG)
    scratch["model"]["scratch"]["family"] = DummyConfig.model_type
    scratch = validate_config(scratch)  # the schema names no family

    with pytest.raises(ConfigError, match="supported families: bert, "):
        checkpoint_shape(checkpoint)
    with pytest.raises(ConfigError, match="model.scratch.family: 'dummy_bert' is not a"):
        check_config(scratch, None)
    with pytest.raises(models.UnsupportedModelError, match="supported families: bert, "):
        models.load_classifier(checkpoint)

    monkeypatch.setitem(FAMILIES, DummyConfig.model_type, DUMMY_ROW)
    # the dry run
    assert checkpoint_shape(checkpoint).model_type == DummyConfig.model_type
    check_config(pretrained, str(checkpoint))
    check_config(scratch, None)
    # the memory estimate of batch_size: auto
    assert EncoderShape.of(model.config) == EncoderShape(2, 4, 32, 48)
    # training: from scratch and from the checkpoint
    spec = TaskSpec("reviews", ("text",), ("negative", "positive"))
    train = pd.DataFrame({"text": ["good film", "dull plot", "great plot", "bad film"] * 4,
                          "label": [1, 0, 1, 0] * 4})
    train_cfg = {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3, "warmup": 0.1,
                 "weight_decay": 0.01}
    for model_cfg in ({"source": "scratch", "max_length": 16,
                       "scratch": {"family": DummyConfig.model_type, "layers": 1, "heads": 2,
                                   "hidden": 16, "intermediate": 32}},
                      {"source": "pretrained", "pretrained": str(checkpoint),
                       "max_length": 16}):
        trained = training.finetune(train, train, spec=spec, model_cfg=model_cfg,
                                    train_cfg=train_cfg, device=torch.device("cpu"), seed=0)
        assert type(trained.model) is DummyForSequenceClassification
    # the engine: it attributes as BERT of the same weights does
    loaded, _ = models.load_classifier(checkpoint)
    bert = BertForSequenceClassification(BertConfig(vocab_size=len(tokenizer), **SIZES))
    bert.load_state_dict(loaded.state_dict())
    batch = tiny_batch("bert", lengths=(5, 4))
    batch["input_ids"] = batch["input_ids"] % len(tokenizer)
    batch["labels"] = batch["labels"] % 2
    results = [attribute(models.prepare_model(m), batch, "gold", "riemann_right", 4).attr
               for m in (loaded, bert)]
    assert torch.equal(*results)
