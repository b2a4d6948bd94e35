"""How many rows (scaled copies) an attribution pass takes: `attribution.batch_size: auto`.

One meaning for every caller of `attribute`: `rows_per_pass` is the rows of a pass of
`attribute(**engine)` over examples of at most `tokens` tokens whose engine calls hold the
examples their passes' rows cover (`examples_per_call`): on a GPU as many rows as fit in
MEMORY_SHARE of its free memory by the estimate `attribution_row_bytes`, which knows what the
engine keeps per row and per example (docs/gpu.md, Memory).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from attnlab.engine.attribution import PANEL_NODES
from attnlab.plumbing.device import free_memory
from attnlab.plumbing.families import FAMILIES

log = logging.getLogger(__name__)

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
        """From a transformers config of a supported family, read by the config.json keys of
        its row in attnlab.plumbing.families: the layers a pass runs besides the analysed ones
        count as layers (BART's decoder), a gated feed-forward twice its width, and a width
        left unset (GPT-2's n_inner) is 4 × hidden."""
        sizes = FAMILIES[config.model_type].sizes
        layers = getattr(config, sizes.layers)
        if sizes.extra_layers:
            layers += getattr(config, sizes.extra_layers)
        hidden = getattr(config, sizes.hidden)
        intermediate = getattr(config, sizes.intermediate) or 4 * hidden
        return cls(layers, getattr(config, sizes.heads), hidden,
                   (2 if sizes.gated else 1) * intermediate)


def attribution_row_bytes(
    shape: EncoderShape, tokens: int, examples_per_row: float = 1.0, panels: int = 0, *,
    kept: int | None = None, lowest: int = 0,
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
    the layer being integrated. `examples_per_row` is examples per row of a pass (`rule_load`).

    Where `attribute` analyses some layers only (its `layers`), `kept` is how many: the 10 L
    H S² of `example` counts those; and `lowest` the lowest of them, where a pass starts from
    the cached state entering it (every family but BART's classifier, which runs whole: 0),
    so that the L of `row` is the L − lowest layers a pass runs.
    """
    s, d, i, h, n_layers = tokens, shape.hidden, shape.intermediate, shape.heads, shape.layers
    run, kept = n_layers - lowest, n_layers if kept is None else kept
    row = run * (8 * s * d + 2 * s * i + 2 * h * s * s) + 4 * h * s * s + 4 * s * i
    example = (10 * kept + 2 * panels) * h * s * s + (n_layers + 1) * s * d
    return int(FLOAT_BYTES * (row + examples_per_row * example))


def rows_that_fit(free: int, per_row: int) -> int:
    """Rows of `per_row` bytes in MEMORY_SHARE of `free` bytes: at least 1, at most MAX_ROWS."""
    return max(1, min(MAX_ROWS, int(MEMORY_SHARE * free) // per_row))


def _nodes(engine: Mapping[str, Any]) -> int | None:
    """Gradient nodes per example of a fixed rule; None for the adaptive rule."""
    rule = engine["quadrature"]
    if rule == "adaptive":
        return None
    return engine["steps"] if isinstance(rule, str) else len(rule[0])


def rule_load(engine: Mapping[str, Any]) -> tuple[float, int]:
    """(examples per row of a pass, adaptive panels held per example) of the rule of `engine`
    (`attribute`'s keyword arguments): the adaptive rule's later rounds refine some examples'
    panels only, so its calls take one example per row; a fixed rule's n nodes of an example
    are n rows."""
    nodes = _nodes(engine)
    if nodes is None:
        return 1.0, engine["max_steps"] // PANEL_NODES
    return 1 / nodes, 0


def examples_per_call(engine: Mapping[str, Any]) -> int:
    """Examples per call of `attribute(**engine)`, its batch_size resolved, that its passes'
    rows hold (`rule_load`)."""
    nodes = _nodes(engine)
    rows = engine["batch_size"]
    return rows if nodes is None else max(1, rows // nodes)


def rows_per_pass(
    config, engine: Mapping[str, Any], tokens: int, device: torch.device, *, scale: int = 1
) -> int:
    """Rows per pass of `attribute(**engine)` for a model of transformers config `config` on
    `device`, its examples at most `tokens` long: an integer engine["batch_size"] as it is;
    `auto` is `rows_that_fit` the GPU's free memory by `attribution_row_bytes`, and
    CPU_BATCH_SIZE on the CPU.

    `scale` is for a caller whose rows are lighter than an attribution pass's (the quadrature
    study's reference of hundreds of nodes per example): an integer setting and the CPU's
    default count rows of an ordinary pass, and it takes `scale` times as many; the GPU
    estimate counts the caller's own rule and is not scaled."""
    setting = engine["batch_size"]
    if setting != "auto":
        return scale * int(setting)
    if device.type != "cuda":
        return scale * CPU_BATCH_SIZE
    free = free_memory(device)
    per_row = attribution_row_bytes(EncoderShape.of(config), tokens, *rule_load(engine))
    rows = rows_that_fit(free, per_row)
    log.info("attribution.batch_size: auto -> %d rows per pass (%.1f GiB free, about %.0f MiB "
             "per row at %d tokens)", rows, free / 2**30, per_row / 2**20, tokens)
    return rows
