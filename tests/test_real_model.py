"""The library and the workflow on a real pretrained checkpoint and real text, as
config/real.yaml runs them: MiniLM (sentence-transformers/all-MiniLM-L6-v2, a BERT of 6 layers x
12 heads) and movie-review sentences, taken from the registry packages that stand in for the hub
(attnlab.data.packages). Skipped, saying which, where those packages are not installed."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import MINILM, ROOT
from test_attribution import attention_module, brute_force
from test_hub import RT_TRAIN
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.data import packages
from attnlab.data.hub import SOURCE_FILE, fetch_checkpoint
from attnlab.engine import models
from attnlab.engine.attribution import attribute
from attnlab.plumbing.config import load_config
from attnlab.plumbing.preflight import ModelShape, checkpoint_shape

REAL = ROOT / "config" / "real.yaml"

MISSING = packages.missing_packages(load_config(REAL))
pytestmark = pytest.mark.skipif(bool(MISSING), reason="; ".join(
    f"needs the package {package.requirement}: {packages.install_hint(package)}"
    for package in MISSING))

Batch = dict[str, torch.Tensor]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> tuple[Path, PreTrainedModel, PreTrainedTokenizerBase]:
    """The packaged MiniLM, unpacked as a configuration naming its hub id gets it (the hub
    fails under HF_HUB_OFFLINE, set in conftest), as a two-class classifier with a seeded head."""
    folder = tmp_path_factory.mktemp("models") / "all-MiniLM-L6-v2"
    fetch_checkpoint(MINILM, folder)
    model, tokenizer = models.load_classifier(folder)
    # The checkpoint has no classifier: transformers draws one with std 0.02, whose logits are so
    # small that F stays within 0.01 of 1/2 whatever the attention, and completeness would hold
    # for almost any attribution. A head of std 0.5 (from its own generator: the same model on
    # every run, whatever the global seed) moves F by up to 0.15 when a layer's attention is
    # removed. Weight and bias are the checkpoint's only parameters not loaded from it.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.classifier.weight.copy_(
            0.5 * torch.randn(model.classifier.weight.shape, generator=generator))
        model.classifier.bias.zero_()
    return folder, model, tokenizer


@pytest.fixture(scope="module")
def reviews() -> Callable[[PreTrainedTokenizerBase, int], Batch]:
    """(tokenizer, n) -> the first `n` critics' sentences of 6 to 14 words of each class from
    the packaged Rotten Tomatoes train split, tokenized into one padded batch with their labels."""
    frame, _ = packages.packaged_split(*RT_TRAIN)
    short = frame[frame["text"].str.split().str.len().between(6, 14)]

    def batch(tokenizer: PreTrainedTokenizerBase, n: int) -> Batch:
        rows = short.groupby("label").head(n).sort_index()
        encoded = tokenizer(rows["text"].tolist(), padding=True, return_tensors="pt")
        return {**encoded, "labels": torch.tensor(rows["label"].to_numpy())}

    return batch


def test_the_packaged_checkpoint_is_minilm_with_every_file_checksummed(minilm):
    folder, model, _ = minilm
    source = json.loads((folder / SOURCE_FILE).read_text())
    assert source["from"] == packages.MINILM.requirement  # the package, not the hub
    # every file, those in subfolders (1_Pooling/config.json) too
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and p.name != SOURCE_FILE)
    assert sorted(source["sha256"]) == files
    assert {"model.safetensors", "1_Pooling/config.json"} <= set(files)
    for name, digest in source["sha256"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    # MiniLM-L6-H384: 6 layers of 12 heads, hidden 384 (BERT's 512 positions)
    assert checkpoint_shape(folder) == ModelShape(layers=6, heads=12, hidden=384, positions=512)
    assert models.head_shape(model) == (6, 12) and model.config.hidden_size == 384


def test_adaptive_attribution_is_complete_on_real_sentences(minilm, reviews):
    _, model, tokenizer = minilm
    batch = reviews(tokenizer, 3)
    result = attribute(model, batch, quadrature_rule="adaptive", tolerance=1e-3)
    assert result.residual.shape == (6, 6)  # (example, layer)
    # not vacuous: removing some layer's attention moves F by far more than the tolerance
    assert float((result.f_full[:, None] - result.f_zero).abs().max()) > 0.05
    # the adaptive rule's guarantee: |Σ Attr(A^l) − (F(A) − F(0·A^l))| ≤ tolerance everywhere
    assert float(result.residual.abs().max()) <= 1e-3


def test_the_engines_riemann_sum_is_the_plain_loop_on_the_real_checkpoint(minilm, reviews):
    _, model, tokenizer = minilm
    # float64, so that what differs is the engine's bookkeeping (padding, copies of several
    # examples in one pass, hidden states cached below layer l), not float32 summation order
    model = copy.deepcopy(model).double()
    batch = reviews(tokenizer, 2)
    lengths = batch["attention_mask"].sum(1).tolist()
    assert min(lengths) < max(lengths)  # some examples are padded to the longest
    # the test's own loop (tests/test_attribution.py): one example and one α at a time, unpadded
    expected = [brute_force(model, batch, attention_module(model, "bert", layer), steps=8)
                for layer in range(6)]
    # batch_size 5: the 8 scaled copies of an example are split over passes, mixed with others'
    result = attribute(models.prepare_model(model), batch, "gold", "riemann_right", steps=8,
                       batch_size=5)
    for layer, per_example in enumerate(expected):
        for b, reference in enumerate(per_example):
            n = lengths[b]
            assert float(reference.abs().max()) > 1e-4  # not a comparison of zeros
            difference = (result.attr[b, layer, :, :n, :n] - reference).abs().max()
            assert float(difference) <= 1e-9, (layer, b)
            # nothing on the padding
            assert not result.attr[b, layer, :, n:].any()
            assert not result.attr[b, layer, :, :, n:].any()
