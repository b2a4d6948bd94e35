"""Rule adversarial_attention's search (Jain & Wallace 2019), the code before its passes started
at the attacked layer against the code now, on the packaged MiniLM and real critics' sentences.

Side by side in one run, on the same sentences, layers and settings:
  * old: attnlab.analyses.adversarial_attention as it was at commit BEFORE, read from git (the
    engine it calls is today's): every search step's forward pass runs the whole model;
  * new: the module now: the hidden states entering the attacked layer are computed once per
    batch, and every step runs that layer and those above it only (its backward pass never
    went below the layer).
What is timed: `adversarial_attention` for every layer of the model, one after another as the
rule runs them, on --examples sentences with config/real.yaml's settings of
explanation.adversarial_attention (epsilon, steps, learning rate, penalty, initial noise) and
the schema's batch size of 64. The model is the packaged sentence-transformers/all-MiniLM-L6-v2
(6 layers x 12 heads; make test installs it) with a seeded classification head of std 0.5
(`length_order.minilm`); the sentences are Rotten Tomatoes' train split in a seeded shuffle,
truncated to 64 tokens (`length_order.sentences`). Defaults: 8 sentences, 2 rounds, each variant
once per round in alternating order, one thread: about 2 minutes on the project's 2 cores.
Beside the times: the work each variant ran through the layers (`measure.LayerWork`: rows and
token positions, padding included; the work ratio is old over new token-layers), the largest
difference of the two variants' tables (JSD, TVD, same prediction, feasible steps) and how
many examples' same-prediction or feasible-step counts differ (0 when equal). Prints one JSON
object and writes it with --out.
Usage: python benchmarks/adversarial_attention.py [--examples 8] [--rounds 2] [--steps N]
       [--out FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from length_order import BATCH_SIZE, largest_difference, one_thread_minilm, sentences
from measure import LayerWork, module_at, old_against_new, write_report

from attnlab.analyses import adversarial_attention
from attnlab.engine import models
from attnlab.plumbing.config import load_config

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "3610e55e349c5d361e9dae30d282de86a3fcda71"  # the last commit before the change


def search_every_layer(module: Any, model: Any, inputs: dict[str, torch.Tensor],
                       cfg: dict[str, Any]) -> pd.DataFrame:
    """The rule's loop: `module`'s adversarial attention of every layer, one table."""
    return pd.concat([module.adversarial_attention(model, inputs, layer, cfg, BATCH_SIZE, seed=0)
                      for layer in range(models.num_layers(model))], ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None,
                        help="optimiser steps per layer (default: config/real.yaml's)")
    parser.add_argument("--out", default=str(
        ROOT / "benchmarks/results/adversarial-attention-cpu.json"))
    args = parser.parse_args()
    model, tokenizer = one_thread_minilm()
    inputs = sentences(tokenizer, args.examples)
    cfg = load_config(ROOT / "config" / "real.yaml")["explanation"]["adversarial_attention"]
    cfg = {**cfg, "steps": args.steps or cfg["steps"]}
    variants = {"old": module_at(BEFORE, "attnlab/analyses/adversarial_attention.py"),
                "new": adversarial_attention}
    lengths = inputs["attention_mask"].sum(dim=1)
    tables, timing = old_against_new(
        {variant: lambda v=variant: search_every_layer(variants[v], model, inputs, cfg)
         for variant in variants}, args.rounds, LayerWork(model))
    old, new = (tables[v].to_numpy(dtype=float) for v in ("old", "new"))
    changed = (tables["old"][["same_prediction", "feasible_steps"]]
               != tables["new"][["same_prediction", "feasible_steps"]]).any(axis=1)
    report = {
        "examples": args.examples, "rounds": args.rounds, "batch_size": BATCH_SIZE,
        "before": BEFORE, "layers": models.num_layers(model),
        "settings": {key: cfg[key] for key in ("epsilon", "steps", "learning_rate", "penalty",
                                               "init_noise")},
        "tokens": {"median": int(lengths.median()), "max": int(lengths.max())},
        **timing,
        "max_abs_difference": largest_difference(old, new),
        "outcome_changes": int(changed.sum()),
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
