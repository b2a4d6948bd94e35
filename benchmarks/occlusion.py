"""Edge occlusion (rule interaction_methods), the code that ran every edge-masked copy through
every row of the occluded layer and those above it, against the code now, on the packaged
MiniLM and real critics' sentences.

Side by side in one run, on the same captured sentences:
  * old: attnlab.methods.occlusion as it was at commit BEFORE, read from git (the engine it
    calls is today's): each of the n(n−1) copies of layer l runs layers l..L−1 on all n rows;
  * new: the module now: layer l runs only the occluded query row, the layers between run every
    row, and the last layer only the classified row ([CLS]); of the last layer only the edges
    from the classified row are run (the others change nothing the head reads: exactly 0).
What is timed: `occlusion` of each of --examples sentences, one after another as the stage
runs them, at the schema's interaction_methods.batch_size (512; config/real.yaml keeps it),
F the probability of the sentence's gold label (--tokens cuts the sentences shorter for a
quick check). The model is the packaged
sentence-transformers/all-MiniLM-L6-v2 (6 layers x 12 heads; make test installs it) with a
seeded classification head of std 0.5 (`length_order.minilm`); the sentences are Rotten
Tomatoes' train split in a seeded shuffle, truncated to 64 tokens as config/real.yaml does
(`length_order.sentences`), each without its padding as the stage scores it. Timed in --rounds
rounds, each variant once per round in alternating order, one thread. Beside the times: the
work each ran through the layers (`measure.LayerWork`, in which the new code's passes that
stop at a layer's attention function to read its keys and values, `models.attended`, count as
whole layers; their token-layers are `layer_tokens_stopped_new`, and `work_ratio_stopped_quarter`
counts them at the quarter of a MiniLM layer's products that they run: the query, key and
value projections, 3 d² of 12 d² a token), the largest difference of the two variants' scores,
and the largest |score| the old code gives the last layer's edges off the classified row
(float noise: the new code's are 0). Prints one JSON object and writes it with --out.
Usage: python benchmarks/occlusion.py [--examples 2] [--rounds 2] [--tokens 64] [--out FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
from length_order import largest_difference, one_thread_minilm, sentences
from measure import LayerWork, module_at, old_against_new, write_report

from attnlab.engine import models
from attnlab.engine.capture import capture
from attnlab.methods import occlusion

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "c48ad5ec8102484904a9fe130973b3e622183cc5"  # the last commit before the change
BATCH_SIZE = 512  # the schema's interaction_methods.batch_size
models_attended = models.attended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64,
                        help="cut each sentence to its first this many tokens (smoke tests)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/occlusion-cpu.json"))
    args = parser.parse_args()
    model, tokenizer = one_thread_minilm()
    encoded = sentences(tokenizer, args.examples)
    lengths = encoded["attention_mask"].sum(dim=1).clamp_max(args.tokens)
    captured = [capture(model, {key: encoded[key][row:row + 1, :n] for key in
                                ("input_ids", "token_type_ids", "attention_mask")},
                        int(encoded["labels"][row]))
                for row, n in enumerate(lengths.tolist())]
    variants = {"old": module_at(BEFORE, "attnlab/methods/occlusion.py", only=["occlusion"]),
                "new": occlusion}
    # each variant's token-layers in passes that stop at the attention function (its last run)
    stopped = dict.fromkeys(variants, 0)

    def run(variant: str) -> list[np.ndarray]:
        stopped[variant] = 0

        def attended(model: Any, hidden: torch.Tensor, *args: Any) -> Any:
            stopped[variant] += hidden.shape[0] * hidden.shape[1]
            return models_attended(model, hidden, *args)

        with mock.patch.object(models, "attended", attended):
            return [variants[variant].occlusion(model, example, BATCH_SIZE).numpy()
                    for example in captured]

    scores, timing = old_against_new({variant: lambda v=variant: run(v) for variant in variants},
                                     args.rounds, LayerWork(model))
    whole = timing["layer_tokens_new"] - stopped["new"]
    # the last layer's rows but the classified one ([CLS], row 0)
    off_classified = max(float(np.abs(old[-1, 1:]).max()) for old in scores["old"])
    report: dict[str, Any] = {
        "examples": args.examples, "rounds": args.rounds, "batch_size": BATCH_SIZE,
        "before": BEFORE, "tokens": {"median": int(lengths.median()), "max": int(lengths.max())},
        **timing, "layer_tokens_stopped_new": stopped["new"],
        "work_ratio_stopped_quarter": round(
            timing["layer_tokens_old"] / (whole + stopped["new"] / 4), 2),
        "max_abs_difference": max(largest_difference(old, new) for old, new in zip(
            scores["old"], scores["new"], strict=True)),
        "largest_abs_score": max(float(np.abs(old).max()) for old in scores["old"]),
        "old_last_layer_off_classified_max_abs": off_classified,
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
