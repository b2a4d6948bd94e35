"""Each model stage's work against the limit: the matmul FLOPs of its loop, counted by
torch.utils.flop_counter, over its seconds, as a share of the CPU's matmul peak measured in the
same run, on the packaged MiniLM and real critics' sentences.

A stage near the peak can only be made faster by doing less work; one far below it spends its
time outside the matrix products (element-wise work, copies, Python), where a faster code path
could gain. The loops are benchmarks/length_order.py's (the stages' own functions with
config/real.yaml's settings; not the attribution engine's, whose autograd calls the counter
cannot follow: benchmarks/real_shape.py measures it against the peak) and three more: token
mixing's probes (Brunner et al. §5, 8 per token) and edge occlusion (the interaction methods'
costliest) on the first sentence, and a fine-tuning step on a batch of up to 32 of the
sentences. The peak is a float32 matmul at MiniLM's feed-forward shape (1,600 x 384 @ 384 x
1,536), the best of five. Each loop runs once to count its FLOPs and once more timed, one
thread; FLOPs are those of the matrix products (mm, addmm, bmm, with their backward and
forward-mode derivatives), so a share below 1 also holds the time of everything else. Prints
one JSON object and writes it with --out.
Usage: python benchmarks/stage_peaks.py [--examples 32] [--search-steps 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from length_order import loops, one_thread_minilm, sentences
from measure import significant, write_report
from torch.utils.flop_counter import FlopCounterMode

from attnlab.analyses.token_mixing import squared_jacobian_norms
from attnlab.engine.capture import capture
from attnlab.methods.occlusion import occlusion

ROOT = Path(__file__).resolve().parents[1]


def matmul_peak(rows: int = 1600) -> float:
    """FLOP/s of the best of five float32 matmuls at MiniLM's feed-forward shape."""
    a, b = torch.randn(rows, 384), torch.randn(384, 1536)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, time.perf_counter() - start)
    return 10 * 2 * rows * 384 * 1536 / best


def more_loops(model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, Callable[[], Any]]:
    """Token mixing's probes and occlusion on the first sentence, and one fine-tuning step."""
    n = int(inputs["attention_mask"][0].sum())
    first = {k: v[:1, :n] for k, v in inputs.items() if k != "labels"}
    batch = {k: v[:32] for k, v in inputs.items()}

    def step() -> None:
        # the adversarial loops leave the weights frozen; training needs their gradients
        model.requires_grad_(True).train()
        model.zero_grad()
        model(**batch).loss.backward()
        model.requires_grad_(False).eval()

    return {
        "token_mixing_probes": lambda: squared_jacobian_norms(model, first, probes=8),
        "occlusion": lambda: occlusion(model, capture(model, first, 1), 512),
        "finetune_step": step,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=32)
    parser.add_argument("--search-steps", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/stage-peaks-cpu.json"))
    args = parser.parse_args()
    model, tokenizer = one_thread_minilm()
    inputs = sentences(tokenizer, args.examples)
    peak = matmul_peak()
    report: dict[str, Any] = {
        "examples": args.examples, "search_steps": args.search_steps,
        "tokens": {"median": int(inputs["attention_mask"].sum(dim=1).median()),
                   "max": int(inputs["attention_mask"].sum(dim=1).max())},
        "matmul_peak_gflops": significant(peak / 1e9), "loops": {}}
    every = {**loops(model, tokenizer, inputs, args.search_steps), **more_loops(model, inputs)}
    # the attribution engine's autograd calls cannot run under the FLOP counter;
    # benchmarks/real_shape.py counts its FLOPs itself and sets them against the same peak
    del every["attribution_maxima"]
    for name, run in every.items():
        with FlopCounterMode(display=False) as counter:
            run()
        start = time.perf_counter()
        run()
        seconds = time.perf_counter() - start
        flops = counter.get_total_flops()
        report["loops"][name] = {
            "gflop": significant(flops / 1e9), "seconds": round(seconds, 3),
            "gflops": significant(flops / seconds / 1e9),
            "share_of_peak": round(flops / seconds / peak, 3)}
        print(name, report["loops"][name], flush=True)
    write_report(report, args.out)


if __name__ == "__main__":
    main()
