"""Token mixing's forward-mode products (rule token_mixing) at several tangent batch sizes
(identifiability.token_mixing.vjp_batch), on the packaged MiniLM and real critics' sentences:
how the element-wise work of forward-mode derivatives depends on the size of one pass.

A pass pushes a batch of B tangents through the layers at once (`torch.func.vmap` over
`torch.func.jvp`). Its matrix products run at near the matmul peak for any B of a few dozen or
more, but its element-wise work (the derivatives of GELU, the softmax and the layer norms, the
residual sums and the copies between them) runs at memory speed, and a pass of B = 512 tangents
of a 30-token sentence holds tensors of B x 30 x 1,536 floats (94 MB) that no cache holds. So
the batch size trades the fixed cost of a pass against the memory traffic of its element-wise
work; each B computes the same products, so the norms are the same (their largest difference
is reported).

Side by side in one run: `squared_jacobian_norms` of each of --examples sentences, one after
another as the stage runs them, with config/real.yaml's estimator (8 Rademacher probes per
input token, a fixed seed; --probes 0 for the exact norms) at each B of --batches, the first
(512, the schema's default before this benchmark) the baseline. The model is the packaged
sentence-transformers/all-MiniLM-L6-v2 (make test installs it) with a seeded classification
head (`length_order.minilm`); the sentences are Rotten Tomatoes' train split in a seeded
shuffle (`length_order.sentences`), each without its padding as the stage scores it
(--tokens cuts them shorter for a quick check). Timed in --rounds rounds, each variant once per
round in alternating order, one thread. Prints one JSON object and writes it with --out.
Usage: python benchmarks/token_mixing.py [--examples 2] [--probes 8] [--batches 512,128,64,32]
       [--rounds 2] [--tokens 64] [--out FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from length_order import one_thread_minilm, sentences
from measure import alternating, write_report

from attnlab.analyses.token_mixing import squared_jacobian_norms

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2)
    parser.add_argument("--probes", type=int, default=8, help="0: the exact norms")
    parser.add_argument("--batches", default="512,256,128,64,32,16",
                        help="tangent batch sizes, the first the baseline")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64,
                        help="cut each sentence to its first this many tokens (smoke tests)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/token-mixing-cpu.json"))
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    model, tokenizer = one_thread_minilm()
    encoded = sentences(tokenizer, args.examples)
    lengths = encoded["attention_mask"].sum(dim=1).clamp_max(args.tokens)
    examples = [{key: encoded[key][row:row + 1, :n] for key in
                 ("input_ids", "token_type_ids", "attention_mask")}
                for row, n in enumerate(lengths.tolist())]
    probes = args.probes or None

    def run(batch: int) -> list[np.ndarray]:
        return [squared_jacobian_norms(model, example, probes, batch, seed=index)[0].numpy()
                for index, example in enumerate(examples)]

    norms, seconds = alternating({f"batch_{b}": lambda b=b: run(b) for b in batches},
                                 args.rounds)
    base = f"batch_{batches[0]}"
    report: dict[str, Any] = {
        "examples": args.examples, "rounds": args.rounds, "probes": args.probes,
        "tokens": {"median": int(lengths.median()), "max": int(lengths.max())},
        "products_per_example": [int(n) * (args.probes or model.config.hidden_size)
                                 for n in lengths.tolist()],
        "baseline": base,
        "seconds": {name: round(s, 3) for name, s in seconds.items()},
        "speedup_over_baseline": {name: round(seconds[base] / s, 2)
                                  for name, s in seconds.items()},
        "fastest": min(seconds, key=seconds.get),
        "max_abs_difference": max(float(np.abs(a - b).max()) for name in norms
                                  for a, b in zip(norms[name], norms[base], strict=True)),
        "largest_norm": max(float(a.max()) for a in norms[base]),
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
