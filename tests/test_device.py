"""Device and precision choice. No GPU here: the choice is tested as a function of what a
device offers, and the fallbacks on the CPU for real."""

from __future__ import annotations

import logging

import pytest
import torch

from attnlab.device import Precision, choose_precision, pick_device, set_precision
from attnlab.errors import ConfigError

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
