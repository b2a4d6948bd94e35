"""What the benchmarks share: the options of a BERT shape and of the device, the device they
run on, peak memory, FLOPs of a BERT-shaped
encoder set against the device's peak, and for those that time the code before a change
against today's, the old module and the work through the model's layers (imported by the
scripts beside it)."""

from __future__ import annotations

import argparse
import ast
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from transformers import BertConfig

from attnlab.engine import models
from attnlab.engine.batch_size import EncoderShape
from attnlab.plumbing.device import device_name, set_precision
from attnlab.plumbing.outputs import provenance

# Dense peak TFLOP/s of NVIDIA's data sheets (tensor cores for tf32/bf16; the sheets' larger
# numbers are "with sparsity", which a BERT pass does not use). Longest name first: "H100 PCIe"
# before "H100".
PEAK_TFLOPS = {
    "H100 PCIe": {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0},
    "H100": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4},  # SXM5
    "H200": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4},  # the H100 SXM's chip, more memory
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0},
}


def add_bert_shape(parser: argparse.ArgumentParser) -> None:
    """The options of a BERT-shaped model and its examples: --layers, --heads, --hidden
    (BERT-base's by default) and --tokens per example (the papers' padded 128)."""
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--tokens", type=int, default=128)


def bert_config(args: argparse.Namespace, **settings: Any) -> BertConfig:
    """The 3-class BERT classifier of `add_bert_shape`'s options (a feed-forward 4 x hidden,
    as BERT's), with the further config `settings`."""
    return BertConfig(num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                      num_labels=3, **settings)


def add_device_options(parser: argparse.ArgumentParser) -> None:
    """The options of a benchmark timed on a device: --threads, --device, --precision, --out."""
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    parser.add_argument("--out", help="also write the JSON report to this file")


def start_device(args: argparse.Namespace) -> tuple[torch.device, str]:
    """The threads, device and precision `add_device_options`' options ask for, set: (the
    device, the precision in use)."""
    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    return device, precision_in_use(args.precision, device)


def pick_device(asked: str) -> torch.device:
    """The device asked for; `cuda` without a visible GPU runs on the CPU and says so."""
    if asked == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no GPU (a CPU build of torch, no driver, or "
              "CUDA_VISIBLE_DEVICES empty); running on the CPU instead", file=sys.stderr)
        return torch.device("cpu")
    return torch.device(asked)


def precision_in_use(asked: str, device: torch.device) -> str:
    """Set TF32 on or off as `asked` allows on `device` (attnlab.plumbing.device.set_precision)
    and say what the passes will compute in: fp32, tf32 or bf16. On the CPU bf16 is bfloat16
    autocast, which torch offers there too (the workflow itself computes in float32 on a CPU)."""
    precision = set_precision(asked, device)
    if precision.bf16 or (device.type == "cpu" and asked == "bf16"):
        return "bf16"
    return "tf32" if precision.tf32 else "fp32"


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict[str, Any]:
    """The GPU memory torch allocated at most since the last reset; on the CPU the process's
    largest resident size so far (Linux reports it in KiB), which includes everything else."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return {"peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
                "kind": "torch.cuda.max_memory_allocated"}
    return {"peak_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "kind": "process max RSS (CPU)"}


def timed_on(device: torch.device, work: Callable[[], Any]) -> tuple[Any, float, dict[str, Any]]:
    """`work()`'s result, the wall seconds it took (the device's queued kernels included) and
    the peak memory while it ran (`peak_memory`)."""
    reset_peak_memory(device)
    start = time.perf_counter()
    result = work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - start, peak_memory(device)


def forward_flops(shape: EncoderShape, tokens: int, layers: int | None = None) -> float:
    """Multiply-adds x 2 of one row's forward pass through `layers` (all by default) encoder
    layers of `tokens` tokens: the Q, K, V and output projections (8 S d²), the feed-forward
    (4 S d i), the scores and the weighted values (4 S² d); embeddings, LayerNorms, softmax
    and the classifier are left out (under 1% at BERT-base, 128 tokens)."""
    s, d, i = tokens, shape.hidden, shape.intermediate
    per_layer = 8 * s * d * d + 4 * s * d * i + 4 * s * s * d
    return float(per_layer * (shape.layers if layers is None else layers))


def device_report(device: torch.device, precision: str, flops: float, seconds: float
                  ) -> dict[str, Any]:
    """The device, the achieved TFLOP/s and its share of the device's dense peak (when the
    device is in PEAK_TFLOPS) for `flops` done in `seconds`."""
    name = device_name(device)
    achieved = flops / seconds / 1e12
    peak = next((table[precision] for key, table in PEAK_TFLOPS.items()
                 if device.type == "cuda" and key in name), None)
    return {"device": name, "precision": precision, "tflop": significant(flops / 1e12),
            "achieved_tflops": significant(achieved), "peak_tflops": peak,
            "share_of_peak": round(achieved / peak, 4) if peak else None}


def significant(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits: tiny CPU smoke runs and GPU runs alike."""
    return float(f"{value:.{digits}g}")


def write_report(report: dict[str, Any], out: str | None) -> None:
    """Print the report as JSON, and write it to `out` too when given, with the command, the
    attnlab code version and the package versions it was measured with."""
    report = {**report, "provenance": provenance({"command": [Path(sys.argv[0]).name,
                                                              *sys.argv[1:]]})}
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")


def module_at(commit: str, path: str, *, only: Sequence[str] = ()) -> ModuleType:
    """The module at `path` (under src/) as it was at `commit`, read from git and imported
    under another name: the code before a change, timed beside today's in one run. `only`:
    its imports and the top-level definitions of these names alone, where the rest of it
    no longer runs against today's package (a registry entry of an older `Method`)."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "show", f"{commit}:src/{path}"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    tree = ast.parse(source)
    if only:
        tree.body = [node for node in tree.body
                     if isinstance(node, ast.Import | ast.ImportFrom)
                     or getattr(node, "name", None) in only]
    module = ModuleType(f"before_{Path(path).stem}")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(tree, f"{commit}:src/{path}", "exec"), module.__dict__)
    return module


class LayerWork:
    """Counts the rows (examples) and the token positions, padding included, that pass through
    the model's layers."""

    def __init__(self, model: Any) -> None:
        self.rows = self.tokens = 0
        self.watch(model)

    def watch(self, model: Any) -> None:
        """Count the layers of `model` too."""
        for layer in models.layer_stack(model):
            layer.register_forward_pre_hook(self.see, with_kwargs=True)

    def see(self, module: Any, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        self.rows += hidden.shape[0]
        self.tokens += hidden.shape[0] * hidden.shape[1]


def alternating(runs: dict[str, Callable[[], Any]], rounds: int
                ) -> tuple[dict[str, Any], dict[str, float]]:
    """Run every variant of `runs` once per round, in alternating order, so that load from
    other jobs falls on all alike: their outputs (the last round's) and mean seconds."""
    seconds, outputs = dict.fromkeys(runs, 0.0), {}
    for round_ in range(rounds):
        for variant in list(runs)[::1 if round_ % 2 == 0 else -1]:
            start = time.perf_counter()
            outputs[variant] = runs[variant]()
            seconds[variant] += time.perf_counter() - start
    return outputs, {variant: total / rounds for variant, total in seconds.items()}


def old_against_new(runs: dict[str, Callable[[], Any]], rounds: int,
                    work: LayerWork) -> tuple[dict[str, Any], dict[str, Any]]:
    """`alternating` of the variants "old" and "new": their outputs and the report's timing
    fields (mean seconds, speed-up old / new, the work each ran through the layers and its
    ratio, old over new token-layers)."""
    def counted(run: Callable[[], Any]) -> tuple[Any, tuple[int, int]]:
        work.rows = work.tokens = 0
        return run(), (work.rows, work.tokens)

    counts, seconds = alternating({variant: lambda r=run: counted(r)
                                   for variant, run in runs.items()}, rounds)
    outputs = {variant: output for variant, (output, _) in counts.items()}
    done = {variant: tokens for variant, (_, tokens) in counts.items()}
    return outputs, {
        "seconds_old": round(seconds["old"], 3),
        "seconds_new": round(seconds["new"], 3),
        "speedup": round(seconds["old"] / seconds["new"], 2),
        "layer_rows_old": done["old"][0], "layer_rows_new": done["new"][0],
        "layer_tokens_old": done["old"][1], "layer_tokens_new": done["new"][1],
        "work_ratio": round(done["old"][1] / done["new"][1], 2)}
