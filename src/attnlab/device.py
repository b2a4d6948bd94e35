"""Choosing the device a stage runs on."""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)
DEVICE_CHOICES = ("auto", "cpu", "cuda")


def pick_device(choice: str = "auto") -> torch.device:
    """`auto` takes a visible GPU if there is one and falls back to CPU, saying so in the log."""
    if choice not in DEVICE_CHOICES:
        raise ValueError(f"device: {choice!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: 'cuda' was asked for but no GPU is visible "
                           "(check CUDA_VISIBLE_DEVICES and the driver)")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
        if choice == "cpu":
            log.info("device: auto -> cpu (no GPU visible)")
    device = torch.device(choice)
    log.info("device: %s", device_name(device))
    return device


def device_name(device: torch.device) -> str:
    """The device as a run summary shows it, e.g. "cuda (NVIDIA H200)" or "cpu (4 threads)"."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
