"""Rule prune_eval's pruning curves and head_importance's accuracy_difference, the code as it was
before their speed-ups against the code now, on the packaged MiniLM and real critics' sentences.

Side by side in one run, on the same examples and scores:
  * old: attnlab.analyses.pruning and .heads as they were at commit BEFORE, read from git
    (`git show`; the engine they call is today's);
  * new: the same functions as they are now.
What is timed, with config/real.yaml's settings (heads.batch_size 64, its prune_percents,
random_seeds and methods):
  * per_layer_curves (Fig. 3) on --examples sentences, ranked by config/real.yaml's rankings:
    attribution to the predicted label, to the gold label (the predicted label's scores
    wherever the model is right, others for the misclassified: `pruning.label_rankings`),
    attention, and 3 random draws. The scores are seeded uniform draws, not attributions: the
    time depends on them only through which (example, mask row) pairs repeat, and two
    rankings rarely give an example the same row except where they are one array;
  * global_curves (Fig. 4) on the same --examples sentences, the heads ranked by
    config/real.yaml's methods (attribution and attention: the means of seeded draws; Taylor:
    the model's gradients on the --importance-examples sentences; 3 random seeds);
  * accuracy_difference_importance (a pass per head, 72, and one with every head) on
    --importance-examples other sentences.
The model is the packaged sentence-transformers/all-MiniLM-L6-v2 (6 layers x 12 heads; make test
installs it) with a seeded classification head of std 0.5 (`length_order.minilm`); its accuracy
on the sentences is reported, since the gold ranking's passes that can be skipped are those of
the examples it gets right. The sentences are Rotten Tomatoes' train split in a seeded shuffle,
truncated to 64 tokens (`length_order.sentences`). Defaults: 16 sentences for the curves and 16
for accuracy_difference, 2 rounds: under 4 minutes on the project's 2 shared cores. Every loop is
timed in --rounds rounds, each variant once per round in alternating order, one thread. Beside
the times: the work each variant ran (row-layers: the examples every layer's passes held;
token-layers: those rows times their pass's width, padding included; the work ratio is old over
new token-layers), the largest difference of the two variants' outputs (accuracies, gold-label
probabilities, per-example correctness, importance scores) and how many per-example outcomes
changed (a correctness or a head's accuracy difference; 0 when equal). Prints one JSON object
and writes it with --out.
Usage: python benchmarks/pruning.py [--examples 16] [--importance-examples 16] [--rounds 2]
       [--out FILE]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from length_order import BATCH_SIZE, as_arrays, largest_difference, one_thread_minilm, sentences
from measure import LayerWork, module_at, old_against_new, write_report

from attnlab.analyses import heads, pruning
from attnlab.engine import examples, models
from attnlab.plumbing.config import load_config

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "ae2ace0b89ef0456e20252e42dbd35dc7819e53a"  # the last commit before the changes


def loops(model: Any, curves: dict[str, torch.Tensor], scoring: dict[str, torch.Tensor],
          ) -> dict[str, Callable[[ModuleType, ModuleType], Any]]:
    """Each timed loop as a function of the pruning and heads modules it runs."""
    cfg = load_config(ROOT / "config" / "real.yaml")["heads"]
    n_layers, n_heads = models.head_shape(model)
    rng = np.random.default_rng(1)  # seed 0 would draw what random_scores' first draw does
    shape = (len(curves["labels"]), n_layers, n_heads)
    predicted = examples.predict(model, curves, batch_size=BATCH_SIZE).argmax(-1)
    by_label = pruning.label_rankings(rng.random(shape), "pred", predicted, curves["labels"],
                                      lambda rows, _: rng.random((len(rows), *shape[1:])))
    rankings = {pruning.PREDICTED: [by_label["predicted"]], pruning.GOLD: [by_label["gold"]],
                pruning.ATTENTION: [rng.random(shape)],
                pruning.RANDOM: pruning.random_scores(shape, seed=0, draws=cfg["random_seeds"])}
    dumps = {name: rng.random((len(scoring["labels"]), n_layers, n_heads))
             for name in ("attribution", "attention")}
    importance = heads.importance_table(model, scoring, dumps, cfg["methods"],
                                        cfg["random_seeds"], seed=0, batch_size=BATCH_SIZE)
    percents = list(cfg["prune_percents"])
    return {
        "per_layer_curves": lambda prune, _: prune.per_layer_curves(
            model, curves, rankings, BATCH_SIZE),
        "global_curves": lambda prune, _: prune.global_curves(
            model, curves, importance, percents, BATCH_SIZE),
        "accuracy_difference": lambda _, head: head.accuracy_difference_importance(
            model, scoring, BATCH_SIZE),
    }


def compared(output: Any) -> list[np.ndarray]:
    """A loop's outputs to compare: curves' accuracies, gold-label probabilities (per-layer
    curves) and per-example correctness; importance scores."""
    if hasattr(output, "correct"):  # Curves, of either variant's module
        table = output.table.reindex(columns=["accuracy", "gold_prob"]).dropna(axis=1)
        return as_arrays([table, *output.correct.values()])
    return as_arrays(output)


def outcome_changes(old: Any, new: Any) -> int:
    """Per-example outcomes that differ: correctness (a curve's, the mean of its draws) or a
    head's accuracy difference, which moves by 1/N at least when a prediction changes."""
    if not hasattr(old, "correct"):
        return int((np.abs(old - new) > 1e-9).sum())
    return sum(int((np.abs(old.correct[key] - new.correct[key]) > 1e-9).sum())
               for key in old.correct)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=16)
    parser.add_argument("--importance-examples", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/pruning-cpu.json"))
    args = parser.parse_args()
    model, tokenizer = one_thread_minilm()
    both = sentences(tokenizer, args.examples + args.importance_examples)
    curves = {key: value[:args.examples] for key, value in both.items()}
    scoring = {key: value[args.examples:] for key, value in both.items()}
    variants = {"old": (module_at(BEFORE, "attnlab/analyses/pruning.py"),
                        module_at(BEFORE, "attnlab/analyses/heads.py")),
                "new": (pruning, heads)}
    lengths = curves["attention_mask"].sum(dim=1)
    report: dict[str, Any] = {
        "examples": args.examples, "importance_examples": args.importance_examples,
        "batch_size": BATCH_SIZE, "rounds": args.rounds, "before": BEFORE,
        "tokens": {"median": int(lengths.median()), "max": int(lengths.max())},
        "accuracy": examples.accuracy(model, curves, batch_size=BATCH_SIZE), "loops": {}}
    counter = LayerWork(model)
    for name, run in loops(model, curves, scoring).items():
        outputs, timing = old_against_new(
            {variant: lambda v=variant, r=run: r(*variants[v]) for variant in variants},
            args.rounds, counter)
        difference = max(largest_difference(a, b) for a, b in zip(
            compared(outputs["old"]), compared(outputs["new"]), strict=True))
        report["loops"][name] = {
            **timing, "max_abs_difference": difference,
            "outcome_changes": outcome_changes(outputs["old"], outputs["new"])}
        print(name, report["loops"][name], flush=True)
    write_report(report, args.out)


if __name__ == "__main__":
    main()
