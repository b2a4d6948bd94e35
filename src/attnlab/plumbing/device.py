"""Choosing the device a stage runs on, and the number formats it may use there."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from attnlab.plumbing.errors import ConfigError

log = logging.getLogger(__name__)
DEVICE_CHOICES = ("auto", "cpu", "cuda")
PRECISION_CHOICES = ("fp32", "tf32", "bf16")
# TF32 and native bfloat16 arithmetic came with Ampere (compute capability 8.0).
AMPERE = (8, 0)


def _visible_devices() -> str:
    """CUDA_VISIBLE_DEVICES as the log shows it: a scheduler (SLURM) sets it per job."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "unset")


def pick_device(choice: str = "auto") -> torch.device:
    """`auto` takes a visible GPU if there is one and falls back to CPU, saying so in the log.

    Only the GPUs in CUDA_VISIBLE_DEVICES are visible (torch honours it), so a job uses the
    GPU its scheduler gave it; within them it takes the first.
    """
    if choice not in DEVICE_CHOICES:
        raise ConfigError(f"device: {choice!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: 'cuda' was asked for but no GPU is visible "
                           f"(CUDA_VISIBLE_DEVICES={_visible_devices()}; check the driver)")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
        if choice == "cpu":
            log.info("device: auto -> cpu (no GPU visible, CUDA_VISIBLE_DEVICES=%s)",
                     _visible_devices())
    device = torch.device(choice)
    if device.type == "cuda":
        log.info("device: %s; CUDA_VISIBLE_DEVICES=%s", device_name(device), _visible_devices())
    else:
        log.info("device: %s", device_name(device))
    return device


def device_name(device: torch.device) -> str:
    """The device as a run summary shows it, e.g. "cuda (NVIDIA H200)" or "cpu (4 threads)"."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"


@dataclass(frozen=True)
class Precision:
    """The number formats a stage uses: TF32 matrix products, bfloat16 fine-tuning."""

    tf32: bool
    bf16: bool


def choose_precision(
    allowed: str, capability: tuple[int, int] | None, bf16_supported: bool
) -> Precision:
    """What the config's `precision` gives on a device.

    `capability` is the GPU's compute capability, None on the CPU (which always computes in
    float32); `bf16_supported` says whether the GPU has native bfloat16 arithmetic.
    """
    if allowed not in PRECISION_CHOICES:
        raise ConfigError(f"precision: {allowed!r} is not one of {', '.join(PRECISION_CHOICES)}")
    tf32 = allowed in ("tf32", "bf16") and capability is not None and capability >= AMPERE
    bf16 = allowed == "bf16" and capability is not None and bf16_supported
    return Precision(tf32=tf32, bf16=bf16)


def set_precision(allowed: str, device: torch.device) -> Precision:
    """Choose the precision for `device`, switch TF32 on or off accordingly, log the choice."""
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        precision = choose_precision(
            allowed, capability, torch.cuda.is_bf16_supported(including_emulation=False)
        )
        # set both ways: a process may run several stages, and cuDNN's default is on
        torch.backends.cuda.matmul.allow_tf32 = precision.tf32
        torch.backends.cudnn.allow_tf32 = precision.tf32
        where = f"GPU of compute capability {capability[0]}.{capability[1]}"
    else:
        precision = choose_precision(allowed, None, False)
        where = "cpu"
    formats = [name for name, used in (("tf32", precision.tf32), ("bf16", precision.bf16)) if used]
    log.info("precision: %s allowed, %s uses %s", allowed, where,
             " and ".join(formats) if formats else "float32")
    return precision


def start_model_job(
    threads: int, choice: str, allowed_precision: str
) -> tuple[torch.device, Precision]:
    """What a workflow job that runs a model does first (inside `outputs.workflow_job`):
    compute with its threads, and pick (and log) its device and precision."""
    torch.set_num_threads(threads)
    device = pick_device(choice)
    return device, set_precision(allowed_precision, device)


def free_memory(device: torch.device) -> int:
    """Bytes a new allocation on the GPU can take: the driver's free memory plus what torch's
    caching allocator holds but does not use."""
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


@contextmanager
def out_of_memory_names(setting: str, value: object, doing: str) -> Iterator[None]:
    """Turn a GPU out-of-memory error inside the block into one line naming the `setting` to
    lower (a ConfigError, which a workflow job reports without a traceback)."""
    try:
        yield
    except torch.OutOfMemoryError as err:
        # torch's first sentences say how much was asked and how much was free
        said = " ".join(str(err).split())
        said = ". ".join(said.split(". ")[:2]).rstrip(".")
        advice = ("lower it to an integer that fits" if value == "auto"
                  else f"lower it (e.g. {max(1, int(value) // 2)})")
        raise ConfigError(f"out of GPU memory {doing} with {setting}={value}: {advice} "
                          f"({said})") from None
