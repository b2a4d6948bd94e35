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


# --- How many rows an attribution pass takes: `attribution.batch_size: auto` ---------------

# auto on the CPU: what the schema's integer default was; more rows per pass gain a CPU little.
CPU_BATCH_SIZE = 32
# Share of the free GPU memory the rows may fill: the rest absorbs the allocator's
# fragmentation, cuBLAS workspaces and what the estimate below leaves out.
MEMORY_SHARE = 0.7
# No more rows than this in one pass, whatever fits: a tiny model would otherwise take a whole
# shard in one engine call, and its progress would show nothing until the end.
MAX_ROWS = 1024
FLOAT_BYTES = 4  # the estimate counts float32 everywhere; under bf16 autocast it is high


@dataclass(frozen=True)
class EncoderShape:
    """The sizes the memory estimate needs: layers run per pass, heads, hidden, feed-forward."""

    layers: int
    heads: int
    hidden: int
    intermediate: int

    @classmethod
    def of(cls, config) -> EncoderShape:
        """From a transformers config of a supported family. BART's classifier runs its
        decoder too (each decoder layer about one encoder layer's size again, with its
        cross-attention): its layers count twice. GPT-2's feed-forward is 4 d wide unless set;
        Llama's, Qwen2's and Mistral's is gated (gate, up, their activation and product are
        kept: twice a GELU feed-forward's two tensors), so it counts twice."""
        if config.model_type == "gpt2":
            return cls(config.n_layer, config.n_head, config.n_embd,
                       config.n_inner or 4 * config.n_embd)
        if config.model_type in ("llama", "qwen2", "mistral"):
            return cls(config.num_hidden_layers, config.num_attention_heads, config.hidden_size,
                       2 * config.intermediate_size)
        if config.model_type == "bart":
            return cls(config.encoder_layers + config.decoder_layers,
                       config.encoder_attention_heads, config.d_model, config.encoder_ffn_dim)
        if config.model_type == "distilbert":
            return cls(config.n_layers, config.n_heads, config.dim, config.hidden_dim)
        return cls(config.num_hidden_layers, config.num_attention_heads, config.hidden_size,
                   config.intermediate_size)


def attribution_row_bytes(
    shape: EncoderShape, tokens: int, examples_per_row: float = 1.0, panels: int = 0
) -> int:
    """Upper estimate of the GPU memory one row of an attribution pass holds at its peak.

    With S = tokens, d = hidden, i = intermediate, H = heads, L = layers, in float32 elements:

        row     = L (8 S d + 2 S i + 2 H S²) + 4 H S² + 4 S i
        example = (10 L + 2 panels) H S² + (L + 1) S d
        bytes   = 4 (row + examples_per_row × example)

    `row` is what autograd keeps of one scaled copy for the backward pass (per layer: the
    layer input, Q, K, V, context, the attention output and both LayerNorm inputs, S d each;
    the feed-forward's GELU input and output, S i each; the softmax output and a reshaped
    copy of it for the product with V, H S² each), plus one
    layer's temporaries of the forward and backward pass. `example` is what the engine holds
    per example for a whole call: the cached hidden states entering every layer, the
    attention, the float64 integral and the products forming Attr (10 L H S² together), and,
    for the adaptive rule, the float64 partial integral of each of up to `panels` panels of
    the layer being integrated. `examples_per_row` is examples per row of a pass: 1 for the
    adaptive rule (engine.dump_rows hands it batch_size examples), 1/steps for a fixed rule.
    """
    s, d, i, h, n_layers = tokens, shape.hidden, shape.intermediate, shape.heads, shape.layers
    row = n_layers * (8 * s * d + 2 * s * i + 2 * h * s * s) + 4 * h * s * s + 4 * s * i
    example = (10 * n_layers + 2 * panels) * h * s * s + (n_layers + 1) * s * d
    return int(FLOAT_BYTES * (row + examples_per_row * example))


def free_memory(device: torch.device) -> int:
    """Bytes a new allocation on the GPU can take: the driver's free memory plus what torch's
    caching allocator holds but does not use."""
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def rows_that_fit(free: int, per_row: int) -> int:
    """Rows of `per_row` bytes in MEMORY_SHARE of `free` bytes: at least 1, at most MAX_ROWS."""
    return max(1, min(MAX_ROWS, int(MEMORY_SHARE * free) // per_row))


def attribution_batch_size(
    setting: int | str,
    config,
    tokens: int,
    device: torch.device,
    *,
    examples_per_row: float = 1.0,
    panels: int = 0,
    cpu_rows: int = CPU_BATCH_SIZE,
) -> int:
    """Rows per attribution pass of a model with transformers config `config` on `device`:
    an integer `setting` as it is; `auto` is `rows_that_fit` the GPU's free memory by
    `attribution_row_bytes`, and `cpu_rows` on the CPU."""
    if setting != "auto":
        return int(setting)
    if device.type != "cuda":
        return cpu_rows
    free = free_memory(device)
    per_row = attribution_row_bytes(EncoderShape.of(config), tokens, examples_per_row, panels)
    rows = rows_that_fit(free, per_row)
    log.info("attribution.batch_size: auto -> %d rows per pass (%.1f GiB free, about %.0f MiB "
             "per row at %d tokens)", rows, free / 2**30, per_row / 2**20, tokens)
    return rows


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
