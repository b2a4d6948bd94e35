"""Attribution at the real model's shape: the engine on a fine-tuned MiniLM and real sentences,
against the naive loop, Captum and the machine's own matmul peak.

MiniLM (sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers x 12 heads, hidden 384, d_head
32) fine-tuned by `make run CONFIG=config/real.yaml`, on the first --examples sentences of a dev
split (tokenized by the model's tokenizer, at most 64 tokens, padded per batch to its longest).
Side by side in one run:
  * engine_adaptive: the engine with config/real.yaml's settings (adaptive quadrature,
    tolerance 1e-3, 64 rows per pass), examples grouped as the attribute job groups them;
  * engine_riemann_right_20: the engine with the paper's rule (m = 20, alpha_k = k/m);
  * naive_riemann_right_20: the per-alpha loop of the authors' code, one alpha per pass: per
    example and layer, a whole forward with layer l's attention scaled and a backward;
  * captum_riemann_right_20: Captum's IntegratedGradients (`pip install captum`) on layer l's
    attention probabilities, whole forward passes of internal_batch_size rows.
The engine attributes every example; naive and Captum, whose speed per example does not depend
on how many share a pass, --compare-examples of them spread over their lengths, on which the
three are checked to agree. Speeds are compared in tokens/s. The examples are split into
--rounds rounds; in each every variant runs in a rotated order, with the dense-matmul rate
(torch.matmul at the engine's shapes, float32, the same threads: 1, as the workflow's attribute
jobs run) measured among them, so that load from other jobs falls on all alike; rates by the
process's CPU time are reported beside those by wall time. FLOPs are counted from the shapes
(`notes` in the JSON has the formula); a profile of the engine's default (torch.profiler,
--profile-examples, not timed) says where its time goes. Prints one JSON object (progress on
stderr) and writes it with --out.
Usage: python benchmarks/real_shape.py [--examples 16] [--compare-examples 4] [--rounds 2]
       [--model DIR] [--data FILE] [--threads 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from measure import significant, write_report
from torch.profiler import ProfilerActivity, profile

from attnlab.data.tasks import TaskSpec
from attnlab.engine import models
from attnlab.engine.attribution import (
    _Runner,
    _score,
    _softmax,
    attribute,
    engine_options,
    fixed_rule,
)
from attnlab.engine.batch_size import EncoderShape, rows_per_pass
from attnlab.engine.examples import encode
from attnlab.engine.intervention import Intervention
from attnlab.plumbing.config import load_config

ROOT = Path(__file__).resolve().parents[1]
STEPS = 20  # the paper's Riemann sum: alpha_k = k/m, k = 1..m
MAX_LENGTH = 64  # config/real.yaml's model.max_length
ENGINE = "engine_adaptive"
ENGINE_RIEMANN = "engine_riemann_right_20"
NAIVE = "naive_riemann_right_20"
CAPTUM = "captum_riemann_right_20"
MATMUL = "matmul_peak"

Batch = dict[str, torch.Tensor]


# ---- FLOPs from the shapes -------------------------------------------------------------------
# Each count is (linear, attention) FLOPs, 2 per multiply-add: the projections and the
# feed-forward run at one rate, the per-head (S x S) matmuls at another (measured apart).

def layer_forward(shape: EncoderShape, s: int) -> np.ndarray:
    """One row's forward through one layer of s tokens: Q, K, V, W_O (8 s d²), the
    feed-forward (4 s d i); Q Kᵀ and A V (4 s² d)."""
    d, i = shape.hidden, shape.intermediate
    return np.array([8 * s * d * d + 4 * s * d * i, 4 * s * s * d], dtype=float)


def layer_backward(shape: EncoderShape, s: int) -> np.ndarray:
    """Input gradients only (autograd.grad asks for the scaled attention, no weight's gradient):
    each linear's dX as its forward; both operands of Q Kᵀ and of A V (8 s² d)."""
    d, i = shape.hidden, shape.intermediate
    return np.array([8 * s * d * d + 4 * s * d * i, 8 * s * s * d], dtype=float)


def scaled_layer_backward(shape: EncoderShape, s: int) -> np.ndarray:
    """Layer l's own backward from its output to its scaled attention A: the feed-forward, W_O
    and dA = dO Vᵀ; nothing below A needs a gradient."""
    d, i = shape.hidden, shape.intermediate
    return np.array([2 * s * d * d + 4 * s * d * i, 2 * s * s * d], dtype=float)


def gradient_row(shape: EncoderShape, s: int, layer: int, first: int) -> np.ndarray:
    """One row with layer `layer` scaled, run forward from layer `first` (0: the whole model,
    `layer`: the engine's cached hidden state) and back to the scaled attention."""
    above = shape.layers - layer - 1
    return ((shape.layers - first) * layer_forward(shape, s) + scaled_layer_backward(shape, s)
            + above * layer_backward(shape, s))


def engine_example_flops(shape: EncoderShape, s: int, nodes: list[int], forward_rows: int
                         ) -> np.ndarray:
    """One example of s tokens attributed by the engine: the whole forward that caches every
    layer's input, and per layer l `forward_rows` forward-only rows (F(0·A^l), the adaptive
    scan) and nodes[l] gradient rows, all from the cached hidden state entering l."""
    total = shape.layers * layer_forward(shape, s)
    for layer, n in enumerate(nodes):
        total = total + forward_rows * (shape.layers - layer) * layer_forward(shape, s)
        total = total + n * gradient_row(shape, s, layer, first=layer)
    return total


@contextmanager
def counted_passes() -> Iterator[list[tuple[int, int, int, bool]]]:
    """Record every pass the engine runs from a cached hidden state: (layer, rows, width,
    with a backward). Its passes are as wide as their rows' longest example, so only they say
    how much padding the engine computed."""
    passes: list[tuple[int, int, int, bool]] = []
    original = _Runner.target_probability

    def counted(self, layer, rows, alphas, target):
        f, intervention = original(self, layer, rows, alphas, target)
        passes.append((layer, len(rows), intervention.scaled.shape[-1],
                       torch.is_grad_enabled()))
        return f, intervention

    _Runner.target_probability = counted
    try:
        yield passes
    finally:
        _Runner.target_probability = original


def executed_flops(shape: EncoderShape, passes: list[tuple[int, int, int, bool]]) -> np.ndarray:
    """FLOPs of the engine's passes as run, at their own widths (padding included)."""
    total = np.zeros(2)
    for layer, rows, width, backward in passes:
        row = (gradient_row(shape, width, layer, first=layer) if backward
               else (shape.layers - layer) * layer_forward(shape, width))
        total += rows * row
    return total


def whole_model_example_flops(shape: EncoderShape, s: int, steps: int) -> np.ndarray:
    """One example attributed by whole-model passes (naive, Captum): one forward capturing the
    attention, and per layer `steps` rows from the embeddings and back to the scaled attention."""
    total = shape.layers * layer_forward(shape, s)
    for layer in range(shape.layers):
        total = total + steps * gradient_row(shape, s, layer, first=0)
    return total


# ---- examples --------------------------------------------------------------------------------

def load_examples(model_dir: Path, data: Path, n: int) -> tuple[object, Batch]:
    """The classifier and the first n sentences of the split, tokenized as the attribute job
    does (right padding to the longest; trimmed per batch later)."""
    model, tokenizer = models.load_classifier(model_dir, "cpu")
    frame = pd.read_parquet(data).iloc[:n].reset_index(drop=True)
    spec = TaskSpec(data.parent.name, ("text",), tuple(model.config.id2label.values()))
    return model, encode(frame, spec, tokenizer, MAX_LENGTH, truncate=True)


def select(inputs: Batch, rows: list[int]) -> Batch:
    """Rows of a tokenized batch, trimmed to their longest example."""
    width = int(inputs["attention_mask"][rows].sum(dim=1).max())
    return {k: v[rows, :width] if v.dim() == 2 else v[rows] for k, v in inputs.items()}


def engine_groups(inputs: Batch, rows: list[int], per_call: int) -> list[list[int]]:
    """The rows in engine calls as `attnlab.engine.dump_rows` makes them: sorted by length (less
    padding), `per_call` examples per call."""
    lengths = inputs["attention_mask"][rows].sum(dim=1)
    order = [rows[k] for k in torch.argsort(lengths, stable=True).tolist()]
    return [order[start : start + per_call] for start in range(0, len(order), per_call)]


def real_lengths(inputs: Batch) -> list[int]:
    return inputs["attention_mask"].sum(dim=1).tolist()


# ---- the variants: each attributes examples and returns their attributions and FLOPs ----------

Attributions = dict[int, torch.Tensor]  # example -> (L, H, n, n) at its real tokens


@dataclass
class Run:
    """What a variant did on some examples: their attributions, the FLOPs (linear, attention)
    of its passes at the examples' own lengths and as run, and, for the engine, per example its
    mean gradient nodes per layer and its completeness residuals."""

    attributions: Attributions = field(default_factory=dict)
    useful: np.ndarray = field(default_factory=lambda: np.zeros(2))  # at the real lengths
    executed: np.ndarray = field(default_factory=lambda: np.zeros(2))  # as run, with padding
    stats: dict[str, list[float]] = field(default_factory=dict)


def crop(attr: torch.Tensor, n: int) -> torch.Tensor:
    return attr[:, :, :n, :n].float()


def run_engine(model, inputs: Batch, rows: list[int], options: dict) -> Run:
    """The engine on the rows, grouped as the attribute job groups them."""
    shape = EncoderShape.of(model.config)
    adaptive = options["quadrature"] == "adaptive"
    # forward-only rows per layer: F(0·A^l), and the adaptive rule's scan
    forward_rows = options["scan_steps"] if adaptive else 1
    run = Run(stats={"nodes": [], "residual": []})
    lengths = real_lengths(inputs)
    for group in engine_groups(inputs, rows, examples_per_call(options)):
        batch = select(inputs, group)
        with counted_passes() as passes:
            result = attribute(model, batch, "gold", **options)
        # the passes, and the whole forward that fills the cache at the call's width
        run.executed += executed_flops(shape, passes) + len(group) * shape.layers * (
            layer_forward(shape, batch["input_ids"].shape[1]))
        for b, row in enumerate(group):
            run.attributions[row] = crop(result.attr[b], lengths[row])
            run.useful += engine_example_flops(shape, lengths[row], result.nodes[b].tolist(),
                                               forward_rows)
        run.stats["nodes"] += result.nodes.float().mean(dim=1).tolist()
        run.stats["residual"] += result.residual.abs().flatten().tolist()
    return run


def examples_per_call(options: dict) -> int:
    """As `attnlab.engine.dump_rows` calls the engine: a fixed rule's calls hold
    batch_size // steps examples (all their copies fill one pass), the adaptive rule's
    batch_size examples (its later rounds refine only some of them)."""
    if options["quadrature"] == "adaptive":
        return options["batch_size"]
    return max(1, options["batch_size"] // options["steps"])


def naive_attribute(model, one: Batch, steps: int) -> torch.Tensor:
    """The authors' loop for one example: per layer, one alpha at a time, a whole forward with
    layer l's attention scaled by alpha and a backward to it. Returns (L, H, n, n)."""
    nodes, weights = fixed_rule("riemann_right", steps)
    inputs = {k: v for k, v in one.items() if k != "labels"}
    capture = Intervention(capture=True)
    with torch.no_grad():
        models.logits(model, inputs, capture)
    attr = []
    for layer in sorted(capture.probs):
        integral = torch.zeros_like(capture.probs[layer][0], dtype=torch.float64)
        for alpha, weight in zip(nodes.tolist(), weights.tolist(), strict=True):
            intervention = Intervention(scale_layer=layer, scale=torch.tensor([alpha]))
            f = _score(models.logits(model, inputs, intervention), one["labels"], "probability")
            (grad,) = torch.autograd.grad(f.sum(), intervention.scaled)
            integral += weight * grad[0].double()
        attr.append(capture.probs[layer][0].double() * integral)
    return torch.stack(attr).float()


def run_naive(model, inputs: Batch, rows: list[int], steps: int) -> Run:
    """The naive loop, one example at a time at its own length (no padding)."""
    shape = EncoderShape.of(model.config)
    run = Run()
    lengths = real_lengths(inputs)
    for row in rows:
        run.attributions[row] = naive_attribute(model, select(inputs, [row]), steps)
        run.useful += whole_model_example_flops(shape, lengths[row], steps)
    run.executed = run.useful  # each example alone: no padding
    return run


def captum_attribute(model, batch: Batch, steps: int, internal_batch_size: int
                     ) -> torch.Tensor:
    """Captum's IntegratedGradients on each layer's attention probabilities of a batch: the
    input is A^l (B, H, S, S), the baseline 0, the model run whole on every scaled copy (the
    copy replaces layer l's probabilities). Returns (B, L, H, S, S)."""
    from captum.attr import IntegratedGradients  # optional: pip install captum

    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch]
    capture = Intervention(capture=True)
    with torch.no_grad():
        models.logits(model, {k: batch[k] for k in keys}, capture)
    attr = []
    for layer in sorted(capture.probs):
        def probabilities(scaled: torch.Tensor, *args: torch.Tensor, layer: int = layer
                          ) -> torch.Tensor:
            inputs = dict(zip(keys, args, strict=True))
            return _softmax(models.logits(model, inputs, Intervention(replace={layer: scaled})))

        attr.append(IntegratedGradients(probabilities).attribute(
            capture.probs[layer], target=batch["labels"],
            additional_forward_args=tuple(batch[k] for k in keys), n_steps=steps,
            method="riemann_right", internal_batch_size=internal_batch_size))
    return torch.stack(attr, dim=1)


def run_captum(model, inputs: Batch, rows: list[int], steps: int, batch_size: int) -> Run:
    """Captum on the rows grouped as the engine's fixed rule groups them: a group's copies fill
    one pass of `batch_size` rows, as they do in the engine."""
    shape = EncoderShape.of(model.config)
    run = Run()
    lengths = real_lengths(inputs)
    per_call = examples_per_call({"quadrature": "riemann_right", "steps": steps,
                                  "batch_size": batch_size})
    for group in engine_groups(inputs, rows, per_call):
        batch = select(inputs, group)
        attr = captum_attribute(model, batch, steps, batch_size)
        for b, row in enumerate(group):
            run.attributions[row] = crop(attr[b], lengths[row])
            run.useful += whole_model_example_flops(shape, lengths[row], steps)
            run.executed += whole_model_example_flops(shape, batch["input_ids"].shape[1], steps)
    return run


# ---- the machine's matmul rate ---------------------------------------------------------------

def matmul_shapes(shape: EncoderShape, rows: int, s: int) -> dict[str, tuple[tuple[int, ...],
                                                                             tuple[int, ...]]]:
    """The engine's matmuls in a pass of `rows` rows of s tokens: (a, b) operand shapes."""
    d, i, h = shape.hidden, shape.intermediate, shape.heads
    tokens, d_head = rows * s, shape.hidden // shape.heads
    return {
        "projection (rows·S, d) x (d, d)": ((tokens, d), (d, d)),
        "feed-forward in (rows·S, d) x (d, i)": ((tokens, d), (d, i)),
        "feed-forward out (rows·S, i) x (i, d)": ((tokens, i), (i, d)),
        "scores (rows·H, S, d_head) x (d_head, S)": ((rows * h, s, d_head), (rows * h, d_head, s)),
        "context (rows·H, S, S) x (S, d_head)": ((rows * h, s, s), (rows * h, s, d_head)),
    }


def clocks() -> np.ndarray:
    """(wall, CPU) seconds: the process's CPU time (all its threads) counts only what it ran,
    not what other jobs took of the cores, so rates by CPU time suffer less from their load."""
    return np.array([time.perf_counter(), time.process_time()])


def matmul_rate(a_shape: tuple[int, ...], b_shape: tuple[int, ...], seconds: float = 0.3
                ) -> np.ndarray:
    """GFLOP per wall second and per CPU second of torch.matmul on float32 operands of these
    shapes: the best of 3 timings each, of as many calls as fill about seconds / 3."""
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    flops = 2 * a.numel() * b_shape[-1]
    torch.matmul(a, b)  # warm-up: allocation, kernel choice
    start = time.perf_counter()
    torch.matmul(a, b)
    calls = max(1, int(seconds / 3 / max(time.perf_counter() - start, 1e-6)))
    best = np.full(2, np.inf)
    for _ in range(3):
        start = clocks()
        for _ in range(calls):
            torch.matmul(a, b)
        best = np.minimum(best, (clocks() - start) / calls)
    return flops / np.maximum(best, 1e-9) / 1e9


def measure_matmuls(shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]
                    ) -> dict[str, np.ndarray]:
    return {name: matmul_rate(a, b) for name, (a, b) in shapes.items()}


def matmul_only_rate(rates: dict[str, float], flops: np.ndarray, shape: EncoderShape) -> float:
    """GFLOP/s the engine would reach if it did nothing but its matmuls, each at the rate
    measured at its shape: the linear FLOPs split among the projections and the feed-forward as
    a layer splits them (4 d² : 2 d i : 2 d i), the attention FLOPs evenly between the scores
    and the context matmuls."""
    d, i = shape.hidden, shape.intermediate
    linear_names, attention_names = list(rates)[:3], list(rates)[3:]
    parts = [4 * d * d, 2 * d * i, 2 * d * i]
    seconds = sum(flops[0] * part / sum(parts) / rates[name]
                  for part, name in zip(parts, linear_names, strict=True))
    seconds += sum(flops[1] / len(attention_names) / rates[name] for name in attention_names)
    return float(flops.sum() / seconds)


# ---- where the engine's time goes ------------------------------------------------------------

CATEGORIES = {  # aten ops, by their self time, by what they compute
    "matmul": r"aten::(mm|addmm|bmm|baddbmm)$",
    "softmax": r"aten::(_softmax|_softmax_backward_data)$",
    "layer_norm": r"aten::native_layer_norm(_backward)?$",
    "gelu": r"aten::gelu(_backward)?$",
}


def profile_engine(model, batch: Batch, options: dict) -> dict:
    """Shares of the engine's wall time on one batch by the self time of the aten ops it ran
    (CATEGORIES; `other_ops` the rest: elementwise ops, copies, views; the largest of them in
    `largest_other_ops`). `outside_ops` is the wall time inside no aten op: Python, module calls,
    the dispatcher and autograd's bookkeeping, and the profiler's own cost per op (so it is an
    upper estimate)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        attribute(model, batch, "gold", **options)
        wall = time.perf_counter() - start
    seconds = dict.fromkeys([*CATEGORIES, "other_ops"], 0.0)
    others: dict[str, float] = {}
    calls = 0
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue  # record_function ranges (autograd's nodes): their self time is bookkeeping
        calls += event.count
        own = event.self_cpu_time_total / 1e6
        name = next((c for c, pattern in CATEGORIES.items() if re.match(pattern, event.key)),
                    "other_ops")
        seconds[name] += own
        if name == "other_ops":
            others[event.key] = own
    report = {name: round(value / wall, 3) for name, value in seconds.items()}
    report["outside_ops"] = round(1 - sum(seconds.values()) / wall, 3)
    report["largest_other_ops"] = {key: round(value / wall, 3) for key, value in
                                   sorted(others.items(), key=lambda kv: -kv[1])[:6]}
    report.update(wall_seconds=round(wall, 2), examples=len(batch["input_ids"]),
                  aten_calls=calls, wall_us_per_call=round(wall / calls * 1e6, 1))
    return report


# ---- the run ---------------------------------------------------------------------------------

def agreement(a: Attributions, b: Attributions) -> float:
    """Largest |difference| of two variants' attributions on the examples both attributed."""
    return max(float((a[k] - b[k]).abs().max()) for k in a.keys() & b.keys())


def rotated(names: list[str], k: int) -> list[str]:
    return names[k % len(names):] + names[: k % len(names)]


def stratified(rows: list[int], lengths: list[int], k: int) -> list[int]:
    """k of the rows spread evenly over their lengths (the middle of each of k equal slices
    of the rows in length order): about their mean length, their shortest and longest."""
    ordered = sorted(rows, key=lambda row: lengths[row])
    return sorted(ordered[int((i + 0.5) * len(ordered) / k)] for i in range(min(k, len(rows))))


def compare(variants: dict[str, Callable[[list[int]], Run]], rounds: list[dict[str, list[int]]],
            shapes: dict) -> tuple[dict[str, Run], dict[str, np.ndarray],
                                   list[dict[str, np.ndarray]]]:
    """Round by round, every variant on its examples of the round (rounds[k][name]) in a rotated
    order, with the matmul rates measured among them. Returns each variant's runs merged, its
    (wall, CPU) seconds and the matmul rates of every round."""
    names = [*variants, MATMUL]
    merged = {name: Run() for name in variants}
    seconds = {name: np.zeros(2) for name in variants}
    rates = []
    for k, rows in enumerate(rounds):
        for name in rotated(names, k):
            if name == MATMUL:
                rates.append(measure_matmuls(shapes))
                continue
            start = clocks()
            run = variants[name](rows[name])
            took = clocks() - start
            seconds[name] += took
            print(f"round {k + 1}/{len(rounds)}: {name}, {len(rows[name])} examples, "
                  f"{took[0]:.1f} s ({took[1]:.1f} s CPU)", file=sys.stderr, flush=True)
            merged[name].attributions.update(run.attributions)
            merged[name].useful += run.useful
            merged[name].executed += run.executed
            for key, values in run.stats.items():
                merged[name].stats.setdefault(key, []).extend(values)
    return merged, seconds, rates


def variant_report(run: Run, clocked: np.ndarray, tokens: int, peak: np.ndarray) -> dict:
    """Examples/s and tokens/s (of the examples it attributed, `tokens` real tokens in all);
    GFLOP/s as run (padding included) and useful (the examples' own lengths), each with its
    fraction of the matmul peak; the same by CPU time."""
    executed, useful = float(run.executed.sum()), float(run.useful.sum())
    seconds, cpu_seconds = (float(value) for value in clocked)
    peak = [float(value) for value in peak]
    n = len(run.attributions)
    entry = {
        "examples": n,
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "examples_per_s": significant(n / seconds),
        "tokens_per_s": significant(tokens / seconds),
        "tokens_per_cpu_s": significant(tokens / cpu_seconds),
        "gflop_per_example": significant(executed / n / 1e9),
        "useful_gflop_per_example": significant(useful / n / 1e9),
        "padding_share_of_flops": round(1 - useful / executed, 3),
        "attention_matmul_share_of_flops": round(float(run.executed[1]) / executed, 3),
        "gflops": significant(executed / seconds / 1e9),
        "fraction_of_peak": round(executed / seconds / 1e9 / peak[0], 3),
        "useful_gflops": significant(useful / seconds / 1e9),
        "useful_fraction_of_peak": round(useful / seconds / 1e9 / peak[0], 3),
        "fraction_of_peak_by_cpu_time": round(executed / cpu_seconds / 1e9 / peak[1], 3),
    }
    if run.stats:
        entry["grad_nodes_per_layer_mean"] = round(float(np.mean(run.stats["nodes"])), 2)
        entry["completeness_abs_error_max"] = significant(max(run.stats["residual"]))
    return entry


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # relative paths are read from the repository's root
    parser.add_argument("--model", default="results/real/finetune/rotten_tomatoes/model",
                        help="a classifier directory (save_pretrained)")
    parser.add_argument("--data", default="results/real/data/rotten_tomatoes/dev.parquet",
                        help="a Parquet split with columns text and label")
    parser.add_argument("--config", default="config/real.yaml",
                        help="the engine's settings: its attribution section")
    parser.add_argument("--examples", type=int, default=16, help="examples the engine attributes")
    parser.add_argument("--compare-examples", type=int, default=4,
                        help="of them, spread over their lengths, what naive and Captum attribute")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds the examples are split into, the variants rotated in each")
    parser.add_argument("--profile-examples", type=int, default=8,
                        help="examples of the profiled engine call (not timed; 0: none)")
    # as the workflow's attribute jobs run (threads: 1); the matmul peak at the same count
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="also write the JSON report to this file")
    return parser.parse_args()


def variants_of(model, inputs: dict[str, torch.Tensor], options: dict) -> dict[str, Callable]:
    """The four variants, each a function of the rows it attributes."""
    riemann = {**options, "quadrature": "riemann_right", "steps": STEPS}
    return {
        ENGINE: lambda rows: run_engine(model, inputs, rows, options),
        ENGINE_RIEMANN: lambda rows: run_engine(model, inputs, rows, riemann),
        NAIVE: lambda rows: run_naive(model, inputs, rows, STEPS),
        CAPTUM: lambda rows: run_captum(model, inputs, rows, STEPS, options["batch_size"]),
    }


def rounds_of(lengths: list[int], args: argparse.Namespace) -> list[dict[str, list[int]]]:
    """The rows each variant attributes in each round. The engine's speed depends on how many
    examples share its passes, so it attributes all of a round's examples, as an attribute job
    its shard; naive and Captum, whose speed per example does not, a few of them spread over
    their lengths (the costliest part of the run)."""
    rounds = []
    for rows in np.array_split(np.arange(len(lengths)), args.rounds):
        few = stratified(rows.tolist(), lengths, -(-args.compare_examples // args.rounds))
        rounds.append({ENGINE: rows.tolist(), ENGINE_RIEMANN: rows.tolist(), NAIVE: few,
                       CAPTUM: few})
    return rounds


def matmul_report(round_rates: list[dict], options: dict, width: int) -> dict:
    """The matmul rates: per shape the median over the rounds, of GFLOP per wall second and
    per CPU second, and the peaks."""
    medians = {name: np.median([r[name] for r in round_rates], axis=0) for name in round_rates[0]}
    rates = {name: significant(float(rate[0])) for name, rate in medians.items()}
    return {"rows_per_pass": options["batch_size"], "width": width,
            "gflops_by_shape": rates, "peak_gflops": max(rates.values()),
            "peak_gflops_by_round": [significant(max(float(v[0]) for v in r.values()))
                                     for r in round_rates],
            "peak_gflop_per_cpu_second": significant(max(float(rate[1])
                                                         for rate in medians.values()))}


def compared(variants: dict) -> dict:
    """The variants' speeds against each other, by tokens/s (the variants attribute different
    numbers of examples of different lengths) and by CPU time."""
    speed = {name: v["tokens_per_s"] for name, v in variants.items()}
    cpu_speed = {name: v["tokens_per_cpu_s"] for name, v in variants.items()}
    pairs = [(a, b) for a in (ENGINE, ENGINE_RIEMANN) for b in (NAIVE, CAPTUM)]
    return {"ratios": {f"{a}_vs_{b}": round(speed[a] / speed[b], 2) for a, b in pairs},
            "ratios_by_cpu_time": {f"{a}_vs_{b}": round(cpu_speed[a] / cpu_speed[b], 2)
                                   for a, b in pairs}}


def agreements(runs: dict) -> dict:
    """How far the variants' attributions of the compared examples are apart."""
    attributions = {name: run.attributions for name, run in runs.items()}
    return {
        "rule": f"riemann_right {STEPS}; max |difference| over every attribution of the "
                "compared examples, float32",
        "attr_abs_max": significant(max(float(a.abs().max())
                                        for a in attributions[NAIVE].values())),
        "engine_vs_naive": significant(agreement(attributions[ENGINE_RIEMANN],
                                                 attributions[NAIVE])),
        "engine_vs_captum": significant(agreement(attributions[ENGINE_RIEMANN],
                                                  attributions[CAPTUM])),
        "naive_vs_captum": significant(agreement(attributions[NAIVE], attributions[CAPTUM])),
        "engine_adaptive_vs_riemann_20": significant(agreement(attributions[ENGINE],
                                                               attributions[ENGINE_RIEMANN])),
    }


def goal(engine: dict, matmul: dict, executed, shape: EncoderShape) -> dict:
    """The engine (its variant report `engine`, its FLOPs `executed`) against the goal of
    half the measured matmul peak, and the rate of its matmuls alone."""
    peak = matmul["peak_gflops"]
    matmul_only = matmul_only_rate(matmul["gflops_by_shape"], executed, shape)
    return {
        "engine_gflops": engine["gflops"], "peak_gflops": peak,
        "fraction_of_peak": engine["fraction_of_peak"],
        "half_of_peak_met": engine["fraction_of_peak"] >= 0.5,
        "useful_fraction_of_peak": engine["useful_fraction_of_peak"],
        "useful_half_of_peak_met": engine["useful_fraction_of_peak"] >= 0.5,
        "fraction_of_peak_by_cpu_time": engine["fraction_of_peak_by_cpu_time"],
        "matmul_only_gflops": significant(matmul_only),
        "matmul_only_fraction_of_peak": round(matmul_only / peak, 3),
    }


def main() -> None:
    args = arguments()
    torch.set_num_threads(args.threads)
    model, inputs = load_examples(ROOT / args.model, ROOT / args.data, args.examples)
    shape = EncoderShape.of(model.config)
    options = engine_options(load_config(ROOT / args.config)["attribution"])
    lengths = real_lengths(inputs)
    # `auto` as the attribute job resolves it on the CPU
    options["batch_size"] = rows_per_pass(model.config, options, max(lengths),
                                          torch.device("cpu"))
    n = len(inputs["input_ids"])
    # a pass's rows are copies of examples of similar length, run as wide as the longest
    width = int(statistics.median(lengths))
    variants = variants_of(model, inputs, options)
    runs, seconds, round_rates = compare(variants, rounds_of(lengths, args),
                                         matmul_shapes(shape, options["batch_size"], width))
    matmul = matmul_report(round_rates, options, width)
    peaks = np.array([matmul["peak_gflops"], matmul["peak_gflop_per_cpu_second"]])
    report = {
        "model": args.model, "data": args.data, "examples": n,
        "compared_examples": sorted(runs[NAIVE].attributions), "rounds": args.rounds,
        "threads": args.threads,
        "shape": {"layers": shape.layers, "heads": shape.heads, "hidden": shape.hidden,
                  "d_head": shape.hidden // shape.heads, "intermediate": shape.intermediate},
        "tokens": {"mean": round(float(np.mean(lengths)), 1), "min": min(lengths),
                   "max": max(lengths)},
        "engine_settings": options,
        "matmul": matmul,
        "variants": {name: variant_report(runs[name], seconds[name],
                                          sum(lengths[row] for row in runs[name].attributions),
                                          peaks) for name in variants},
    }
    report |= compared(report["variants"])
    report["agreement"] = agreements(runs)
    report["goal"] = goal(report["variants"][ENGINE], matmul, runs[ENGINE].executed, shape)
    if args.profile_examples:
        rows = engine_groups(inputs, list(range(min(args.profile_examples, n))), n)[0]
        report["profile"] = profile_engine(model, select(inputs, rows), options)
    report["notes"] = notes(report)
    write_report(report, args.out)


# How the report's numbers are counted: the first of its notes.
COUNTING = [
    "FLOPs (2 per multiply-add) per layer of s tokens, d = hidden, i = intermediate: "
    "forward 8 s d² + 4 s d i + 4 s² d (Q, K, V, W_O; feed-forward; Q Kᵀ and A V); "
    "input-gradient backward of a layer above the scaled one 8 s d² + 4 s d i + 8 s² d "
    "(every linear's dX; both operands of Q Kᵀ and A V; no weight gradients: autograd.grad "
    "asks only for the scaled attention); backward of the scaled layer l 2 s d² + 4 s d i + "
    "2 s² d (feed-forward, W_O, dA = dO Vᵀ). As run (gflop_per_example, gflops, "
    "fraction_of_peak), s is the width of each pass: the engine's passes are recorded (a "
    "wrapper of _Runner.target_probability) with their rows and width, Captum's run at "
    "their call's padded width; on 4 examples this count and torch.profiler's with_flops "
    "count of aten::mm, addmm and bmm agreed within 0.2 % (the rest: pooler, classifier). "
    "useful_*: s is each example's own length, padding is not counted. Engine, per "
    "example: one "
    "forward of all L layers (the cache) and, per layer l, scan_steps (adaptive; 1 for a "
    "fixed rule) forward-only rows of L − l layers (F(0·A^l), the scan) and per "
    "gradient node (L − l) forwards + the scaled layer's backward + (L − l − 1) backwards. "
    "Naive and Captum, per example: one forward of L layers (capturing A) and, per layer l "
    "and node, L forwards + the scaled layer's backward + (L − l − 1) backwards. "
    "Embeddings, LayerNorm, softmax, GELU, the pooler and the classifier are not counted.",
    "Peak: torch.matmul in float32 at the engine's shapes (a pass of rows_per_pass rows at "
    "the examples' median length), the same threads, in every round the best of 3 timings, "
    "the median over the rounds; peak_gflops is the fastest shape. "
    "goal.matmul_only_gflops: the rate the engine's FLOPs would run at if it did nothing "
    "but its matmuls, each at the rate measured at its shape. *_by_cpu_time and "
    "peak_gflop_per_cpu_second: the same by the process's CPU time (all its threads), "
    "which other jobs' load on the cores inflates less than wall time.",
    "naive: the authors' loop (github.com/YRdddream/attattr, "
    "examples/generate_attrscore.py) with one alpha per pass: per example and layer, for "
    "each alpha a whole forward with layer l's attention scaled and a backward to it. Their "
    "code batches batch_size copies of one example (16 by default) and pads every example to "
    "max_seq_length; here each example runs alone at its own length, with the paper's right "
    "Riemann sum (their code's is the left one), node for node the engine's riemann_right 20.",
    "captum: captum.attr.IntegratedGradients (captum 0.9.0 installed into the venv, torch "
    "and numpy unchanged) on A^l with baseline 0, method riemann_right, n_steps 20, "
    "internal_batch_size = the engine's batch_size; each scaled copy replaces layer l's "
    "probabilities and the model runs whole from the embeddings; examples grouped as the "
    "engine's fixed rule groups them (batch_size // 20 per call).",
    "The engine attributes all examples, a round's in the calls an attribute job would make "
    "(its speed depends on how many examples share its passes); naive and Captum "
    "compared_examples, spread over the lengths (their speed per example does not depend "
    "on that). ratios are of tokens/s, which corrects for the different lengths; "
    "ratios_by_cpu_time the same by CPU time.",
]


def notes(report: dict) -> list[str]:
    """How the numbers were counted (COUNTING), and the reading of the profile and the goal."""
    lines = list(COUNTING)
    if "profile" in report:
        p = report["profile"]
        lines.append(
            f"Profile of the engine's default on {p['examples']} examples (torch.profiler, "
            f"{p['wall_seconds']} s; self time of aten ops as shares of wall time): matmul "
            f"{p['matmul']:.0%}, softmax {p['softmax']:.0%}, layer norm {p['layer_norm']:.0%}, "
            f"GELU {p['gelu']:.0%}, other ops (elementwise, copies) {p['other_ops']:.0%}, "
            f"outside any op (Python, module calls, dispatch, autograd bookkeeping, the "
            f"profiler's own cost) {p['outside_ops']:.0%}; {p['aten_calls']} op calls, "
            f"{p['wall_us_per_call']} µs of wall time per call.")
    goal = report["goal"]
    lines.append(
        f"Goal (the engine at >= half the measured matmul peak): "
        f"{goal['fraction_of_peak']:.0%} of {goal['peak_gflops']} GFLOP/s; doing nothing but "
        f"its matmuls, each at the rate measured at its shape, it would reach "
        f"{goal['matmul_only_fraction_of_peak']:.0%}.")
    return lines


if __name__ == "__main__":
    main()
