"""Device and precision choice. No GPU here: the choice is tested as a function of what a
device offers, and the fallbacks on the CPU for real."""

from __future__ import annotations

import logging

import pytest
import torch
from tiny_models import (
    CAUSAL_FAMILIES,
    tiny_batch,
    tiny_causal_lm,
    tiny_classifier,
    tiny_prompts,
    without_labels,
)
from transformers import BertConfig, BertForSequenceClassification

from attnlab.engine import batch_size, models
from attnlab.engine.attribution import _Runner
from attnlab.engine.batch_size import (
    CPU_BATCH_SIZE,
    MAX_ROWS,
    EncoderShape,
    attribution_row_bytes,
    examples_per_call,
    rows_per_pass,
    rows_that_fit,
)
from attnlab.plumbing.device import (
    Precision,
    choose_precision,
    out_of_memory_names,
    pick_device,
    set_precision,
)
from attnlab.plumbing.errors import ConfigError

AMPERE, VOLTA = (8, 0), (7, 0)
FP32 = Precision(tf32=False, bf16=False)


@pytest.mark.parametrize(
    "allowed, capability, bf16_supported, expected",
    [
        ("fp32", (9, 0), True, FP32),
        ("tf32", (9, 0), True, Precision(tf32=True, bf16=False)),
        ("tf32", AMPERE, True, Precision(tf32=True, bf16=False)),
        ("tf32", VOLTA, False, FP32),  # no TF32 before Ampere
        ("bf16", AMPERE, True, Precision(tf32=True, bf16=True)),
        ("bf16", (8, 6), False, Precision(tf32=True, bf16=False)),
        ("bf16", VOLTA, False, FP32),
        ("bf16", None, True, FP32),  # the CPU computes in float32 whatever is allowed
        ("tf32", None, False, FP32),
    ],
)
def test_precision_is_what_the_config_allows_and_the_device_has(
    allowed, capability, bf16_supported, expected
):
    assert choose_precision(allowed, capability, bf16_supported) == expected


def test_unknown_precision_is_named():
    with pytest.raises(ValueError, match="precision: 'fp16' is not one of fp32, tf32, bf16"):
        choose_precision("fp16", None, False)


def test_cpu_falls_back_to_float32_and_says_so(caplog):
    caplog.set_level(logging.INFO, logger="attnlab")
    assert set_precision("bf16", torch.device("cpu")) == FP32
    assert "precision: bf16 allowed, cpu uses float32" in caplog.text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback without a GPU")
def test_auto_falls_back_to_cpu_with_a_log_line(caplog, monkeypatch):
    # what a SLURM job sees on a node whose GPU torch cannot use
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    caplog.set_level(logging.INFO, logger="attnlab")
    assert pick_device("auto") == torch.device("cpu")
    assert "device: auto -> cpu (no GPU visible, CUDA_VISIBLE_DEVICES=0)" in caplog.text
    with pytest.raises(ConfigError, match="no GPU is visible .CUDA_VISIBLE_DEVICES=0"):
        pick_device("cuda")


BERT_BASE = BertConfig()  # 12 layers, 12 heads, hidden 768, intermediate 3072
GPU, GIB = torch.device("cuda"), 2**30
# attribute()'s options of the paper's rule and of the adaptive rule (up to 40 panels)
RIEMANN_20 = {"batch_size": "auto", "quadrature": "riemann_right", "steps": 20}
ADAPTIVE = {"batch_size": "auto", "quadrature": "adaptive", "max_steps": 120}


def saved_bytes_per_row(model, tokens: int, rows: int = 3) -> float:
    """What autograd keeps for the backward pass of one attribution row at layer 0 (every
    layer after the scaled one runs with grad), counted storage by storage."""
    family = model.config.model_type
    batch = (tiny_prompts(lengths=(tokens,) * rows) if family in CAUSAL_FAMILIES
             else tiny_batch(family, lengths=(tokens,) * rows))
    runner = _Runner(model, without_labels(batch))
    saved = {}

    def pack(tensor):
        saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        runner.target_probability(0, torch.arange(rows), torch.full((rows,), 0.5),
                                  torch.zeros(rows, dtype=torch.long))
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(size for ptr, size in saved.items() if ptr not in weights) / rows


@pytest.mark.parametrize("tokens", [8, 24])
@pytest.mark.parametrize("family", ["bert", *CAUSAL_FAMILIES])
def test_row_estimate_covers_what_autograd_keeps_without_doubling_it(family, tokens):
    model = models.prepare_model(tiny_classifier(family) if family == "bert"
                                 else tiny_causal_lm(family, dtype=torch.float32))
    kept = saved_bytes_per_row(model, tokens)
    # examples_per_row=0: the row's own part, which includes one layer's temporaries on top
    estimate = attribution_row_bytes(EncoderShape.of(model.config), tokens, examples_per_row=0)
    assert kept <= estimate <= 2.5 * kept


@pytest.mark.slow
def test_row_estimate_at_the_papers_shape_is_what_autograd_keeps_there_within_a_third():
    shape = EncoderShape.of(BERT_BASE)
    assert shape == EncoderShape(layers=12, heads=12, hidden=768, intermediate=3072)
    torch.manual_seed(0)
    model = models.prepare_model(BertForSequenceClassification(
        BertConfig(num_labels=3, attn_implementation="eager")))
    # a pass row of BERT-base at 128 tokens (the papers' length): autograd keeps 82 MiB of it,
    # the estimate says 99 MiB (its one layer of temporaries on top); a storage count, the
    # same on every CPU
    kept = saved_bytes_per_row(model, 128, rows=1)
    estimate = attribution_row_bytes(shape, 128, examples_per_row=0)
    assert kept <= estimate <= 1.3 * kept
    # the adaptive rule's state: a float64 partial integral (H x S x S) per panel
    panels = attribution_row_bytes(shape, 128, panels=40) - attribution_row_bytes(shape, 128)
    assert panels == 40 * 8 * 12 * 128 * 128
    # the quadratic term: four times the tokens, more than four times the memory
    assert attribution_row_bytes(shape, 512, 0) > 4 * attribution_row_bytes(shape, 128, 0)


@pytest.mark.parametrize("family", ["distilbert", "bart"])
def test_every_family_has_a_shape(family):
    shape = EncoderShape.of(tiny_classifier(family).config)
    assert shape.heads == 4 and shape.hidden == 32 and shape.intermediate == 48
    assert shape.layers == (4 if family == "bart" else 3)  # BART's decoder counts


def test_rows_that_fit_take_a_share_of_the_free_memory():
    assert rows_that_fit(free=10 * GIB, per_row=GIB) == 7
    assert rows_that_fit(free=GIB // 2, per_row=GIB) == 1  # one row is always tried
    assert rows_that_fit(free=10**15, per_row=1) == MAX_ROWS


def test_auto_batch_size_on_a_gpu_comes_from_its_free_memory(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="attnlab")
    monkeypatch.setattr(batch_size, "free_memory", lambda device: 80 * GIB)
    per_row = attribution_row_bytes(EncoderShape.of(BERT_BASE), 128, 1 / 20)
    rows = rows_per_pass(BERT_BASE, RIEMANN_20, 128, GPU)
    # 70 % of the free memory in whole rows: the rows fit, one row more would not
    assert rows * per_row <= 0.7 * 80 * GIB < (rows + 1) * per_row
    assert f"attribution.batch_size: auto -> {rows} rows per pass (80.0 GiB free" in caplog.text
    # a quarter of the free memory, a quarter of the rows (to the row rounded off)
    monkeypatch.setattr(batch_size, "free_memory", lambda device: 20 * GIB)
    quarter = rows_per_pass(BERT_BASE, RIEMANN_20, 128, GPU)
    assert abs(quarter - rows / 4) <= 1
    # the adaptive rule's state (an example per row, 40 panels), then longer inputs: fewer rows
    adaptive = rows_per_pass(BERT_BASE, ADAPTIVE, 128, GPU)
    assert 1 <= rows_per_pass(BERT_BASE, ADAPTIVE, 256, GPU) < adaptive < quarter
    # a rule of its own nodes (the quadrature study's reference) holds an example per 512 rows
    nodes = torch.linspace(0, 1, 512)
    own = {"batch_size": "auto", "quadrature": (nodes, nodes)}
    assert rows_per_pass(BERT_BASE, own, 128, GPU) == rows_that_fit(
        20 * GIB, attribution_row_bytes(EncoderShape.of(BERT_BASE), 128, 1 / 512))


def test_an_explicit_batch_size_wins_and_auto_is_fixed_on_the_cpu(monkeypatch):
    monkeypatch.setattr(batch_size, "free_memory", lambda device: 80 * GIB)
    cpu = torch.device("cpu")
    assert rows_per_pass(BERT_BASE, {**RIEMANN_20, "batch_size": 80}, 128, GPU) == 80
    assert rows_per_pass(BERT_BASE, {**RIEMANN_20, "batch_size": 7}, 128, cpu) == 7
    assert rows_per_pass(BERT_BASE, RIEMANN_20, 128, cpu) == CPU_BATCH_SIZE
    # a caller of lighter rows scales the setting and the CPU's default, not the GPU estimate
    assert rows_per_pass(BERT_BASE, {**RIEMANN_20, "batch_size": 7}, 128, cpu, scale=8) == 56
    assert rows_per_pass(BERT_BASE, RIEMANN_20, 128, cpu, scale=8) == 8 * CPU_BATCH_SIZE
    assert rows_per_pass(BERT_BASE, RIEMANN_20, 128, GPU, scale=8) == rows_per_pass(
        BERT_BASE, RIEMANN_20, 128, GPU)


def test_an_engine_call_holds_the_examples_its_passes_cover():
    assert examples_per_call({**RIEMANN_20, "batch_size": 100}) == 5
    assert examples_per_call({**RIEMANN_20, "batch_size": 7}) == 1  # at least one
    assert examples_per_call({**ADAPTIVE, "batch_size": 100}) == 100


@pytest.mark.parametrize("value, advice", [
    (64, "lower it (e.g. 32)"),
    ("auto", "lower it to an integer that fits"),
])
def test_out_of_memory_becomes_one_line_naming_the_setting(value, advice):
    message = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
               "79.19 GiB of which 1.50 GiB is free.\nOf the allocated memory ...")
    with pytest.raises(ConfigError) as caught:
        with out_of_memory_names("attribution.batch_size", value, "attributing task mnli"):
            raise torch.OutOfMemoryError(message)
    assert str(caught.value) == (
        f"out of GPU memory attributing task mnli with attribution.batch_size={value}: {advice} "
        "(CUDA out of memory. Tried to allocate 2.00 GiB)")
    assert "\n" not in str(caught.value)


def test_other_errors_pass_through_the_out_of_memory_guard():
    with pytest.raises(RuntimeError, match="not memory"):
        with out_of_memory_names("finetune.batch_size", 32, "fine-tuning"):
            raise RuntimeError("not memory")
