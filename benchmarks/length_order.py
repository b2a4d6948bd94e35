"""The model stages' batched loops with their examples in the split's order, sorted by length,
and sorted with a bound on padding, on the packaged MiniLM and real critics' sentences.

Each batch is cut to its own longest example (`attnlab.engine.examples.batches`), so batches of
similar lengths carry little padding. Side by side in one run, on the same examples:
  * input_order: the split's order in batches of the batch size, as these loops first ran
    (`examples.by_length` replaced by the identity order, `examples.batches` at padding 1);
  * by_length: shortest first in batches of the batch size (padding 1), as they ran next;
  * bounded: shortest first, a batch also ending before the example that would make more than
    `examples.PADDING` of its token slots padding, as they run now.
The results are put back in the split's order. The loops: head_importance's Taylor gradients,
token_identifiability's hidden states, adversarial keys' evaluation, adversarial attention's
search (at --search-steps optimiser steps), attention_permutation's ranking table (attention,
gradient and leave-one-out), effective attention (float64), prune_eval's per-layer curves (one
seeded ranking, both orders) and its attribution of misclassified examples (the engine with
config/real.yaml's settings but a fixed rule, Gauss-Legendre at 6 nodes, on the first 64
examples). The model is the packaged
sentence-transformers/all-MiniLM-L6-v2 (make test installs it) with a seeded classification
head; the examples are the first --examples sentences of the packaged Rotten Tomatoes train
split in a seeded shuffle, truncated to 64 tokens as config/real.yaml does (the default, 50, is
what config/real-seeds.yaml gives these stages, in batches of the schema's 64). Every loop is
timed in --rounds rounds, each variant once per round in rotating order, one thread, so that
load from other jobs falls on all alike. The largest difference of each variant's outputs from
input_order's is reported beside their times (only the float path of a narrower batch
differs). Prints one JSON object and writes it with --out.
Usage: python benchmarks/length_order.py [--examples 50] [--rounds 2] [--search-steps 5]
       [--out FILE]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import torch
from measure import write_report

from attnlab.analyses import (
    adversarial_attention,
    attention_ranking,
    effective_attention,
    heads,
    pruning,
    token_identifiability,
)
from attnlab.data import packages
from attnlab.data.hub import fetch_checkpoint
from attnlab.engine import examples, models
from attnlab.engine.attribution import engine_options
from attnlab.engine.batch_size import examples_per_call
from attnlab.plumbing.config import load_config

ROOT = Path(__file__).resolve().parents[1]
BATCH_SIZE = 64  # the schema's default of every stage timed here
ATTRIBUTED = 64  # examples attributed by the engine (the slowest loop)
MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # its packaged copy where the hub is out of reach
RT_TRAIN = ("cornell-movie-review-data/rotten_tomatoes", "default", "train")


def minilm(folder: Path) -> tuple[Any, Any]:
    """The packaged MiniLM as a two-class classifier with a seeded head of std 0.5 (the
    checkpoint has none; std 0.02 would leave every output near 1/2)."""
    fetch_checkpoint(MINILM, folder)
    model, tokenizer = models.load_classifier(folder)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.classifier.weight.copy_(
            0.5 * torch.randn(model.classifier.weight.shape, generator=generator))
    return model.eval(), tokenizer


def one_thread_minilm() -> tuple[Any, Any]:
    """`minilm` unpacked into a temporary folder, with torch on one thread, as the workflow's
    model jobs run on a CPU of 2 cores, and its global seed fixed."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        return minilm(Path(tmp) / "all-MiniLM-L6-v2")


def sentences(tokenizer: Any, n: int) -> dict[str, torch.Tensor]:
    frame, _ = packages.packaged_split(*RT_TRAIN)
    rows = frame.sample(n=n, random_state=0)
    encoded = tokenizer(rows["text"].tolist(), padding="longest", truncation=True,
                        max_length=64, return_tensors="pt")
    return {**encoded, "labels": torch.tensor(rows["label"].to_numpy())}


def as_arrays(value: Any) -> list[np.ndarray]:
    """A loop's output as float arrays, to compare the variants."""
    if isinstance(value, pd.DataFrame):
        return [value.select_dtypes("number").to_numpy(dtype=float)]
    if isinstance(value, torch.Tensor | np.ndarray):
        return [np.asarray(value, dtype=float)]
    return [a for part in value for a in as_arrays(part)]


def largest_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b|, NaN where both are NaN counted as equal (a τ of one content token), and
    infinite where only one is."""
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    return float(np.abs(np.nan_to_num(a) - np.nan_to_num(b)).max(initial=0.0))


def padded_tokens(inputs: dict[str, torch.Tensor], order: torch.Tensor, padding: float) -> int:
    """Tokens a loop's passes hold, padding included, with its batches taken in `order` under
    the bound `padding` (`examples.batches`)."""
    inputs = {key: value[order] for key, value in inputs.items()}
    return sum(batch["attention_mask"].numel()
               for _, batch in examples.batches(inputs, BATCH_SIZE, padding=padding))


def loops(model: Any, tokenizer: Any, inputs: dict[str, torch.Tensor], search_steps: int
          ) -> dict[str, Callable[[], Any]]:
    config = load_config(ROOT / "config" / "real.yaml")
    explanation = config["explanation"]
    search = {**explanation["adversarial_attention"], "steps": search_steps}
    adversary = adversarial_attention.KeyAdversary(
        model.config.hidden_size, explanation["adversarial_keys"]["hidden"])
    # a fixed rule: its calls take 64 // 6 examples each, which the order groups by length
    # (the adaptive rule's take 64, all of a stage's misclassified ones at once)
    engine = {**engine_options(config["attribution"]), "quadrature": "gauss_legendre",
              "steps": 6, "batch_size": BATCH_SIZE}
    few = {key: value[:ATTRIBUTED] for key, value in inputs.items()}
    # per-layer pruning by a seeded ranking: 13 masks an order, each a row per example
    ranking = {pruning.ATTENTION: [np.random.default_rng(1).random(
        (len(inputs["labels"]), *models.head_shape(model)))]}
    return {
        "taylor_gradients": lambda: heads.taylor_gradients(model, inputs, BATCH_SIZE),
        "token_states": lambda: token_identifiability.token_states(model, inputs, BATCH_SIZE),
        "key_adversary_evaluation": lambda: adversarial_attention.evaluate_key_adversary(
            model, adversary, inputs, BATCH_SIZE),
        "adversarial_attention_search": lambda: adversarial_attention.adversarial_attention(
            model, inputs, 5, search, BATCH_SIZE, seed=0),
        "ranking_table": lambda: attention_ranking.ranking_table(
            model, tokenizer, inputs, BATCH_SIZE),
        "effective_attention": lambda: effective_attention.analyse_examples(
            model, tokenizer, inputs, BATCH_SIZE),
        "per_layer_curves": lambda: pruning.per_layer_curves(
            model, inputs, ranking, BATCH_SIZE).table,
        "attribution_maxima": lambda: pruning.attribution_maxima(
            model, few, few["labels"], engine, examples_per_call(engine)),
    }


def input_order(inputs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`examples.by_length` as the code before it had it: no reordering."""
    return inputs, torch.arange(len(inputs["input_ids"]))


def unbounded(*args: Any, **kwargs: Any) -> Any:
    """`examples.batches` as the code before the padding bound had it: batches of the batch size."""
    return BATCHES(*args, **{**kwargs, "padding": 1.0})


BATCHES = examples.batches
# what each variant puts in place of the module's functions (none: today's code)
VARIANTS: dict[str, dict[str, Callable[..., Any]]] = {
    "input_order": {"by_length": input_order, "batches": unbounded},
    "by_length": {"batches": unbounded},
    "bounded": {},
}


def timed(run: Callable[[], Any], variant: str) -> tuple[Any, float]:
    with ExitStack() as stack:
        for name, replacement in VARIANTS[variant].items():
            stack.enter_context(mock.patch.object(examples, name, replacement))
        start = time.perf_counter()
        return run(), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--search-steps", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/length-order-cpu.json"))
    args = parser.parse_args()
    model, tokenizer = one_thread_minilm()
    inputs = sentences(tokenizer, args.examples)
    lengths = inputs["attention_mask"].sum(dim=1)
    sorted_order = lengths.argsort(stable=True)
    report: dict[str, Any] = {
        "examples": args.examples, "batch_size": BATCH_SIZE, "padding": examples.PADDING,
        "rounds": args.rounds,
        "tokens": {"median": int(lengths.median()), "max": int(lengths.max()),
                   "real": int(lengths.sum()),
                   "padded_input_order": padded_tokens(inputs, torch.arange(len(lengths)), 1.0),
                   "padded_by_length": padded_tokens(inputs, sorted_order, 1.0),
                   "padded_bounded": padded_tokens(inputs, sorted_order, examples.PADDING)},
        "loops": {}}
    names = list(VARIANTS)
    for name, run in loops(model, tokenizer, inputs, args.search_steps).items():
        seconds = dict.fromkeys(names, 0.0)
        outputs: dict[str, Any] = {}
        for round_ in range(args.rounds):
            for variant in names[round_ % 3:] + names[:round_ % 3]:
                outputs[variant], elapsed = timed(run, variant)
                seconds[variant] += elapsed
        row: dict[str, Any] = {f"seconds_{v}": round(seconds[v] / args.rounds, 3) for v in names}
        row["speedup_bounded_over_by_length"] = round(seconds["by_length"] / seconds["bounded"], 2)
        row["speedup_bounded_over_input_order"] = round(
            seconds["input_order"] / seconds["bounded"], 2)
        for variant in names[1:]:
            row[f"max_abs_difference_{variant}"] = max(
                largest_difference(a, b) for a, b in zip(
                    as_arrays(outputs["input_order"]), as_arrays(outputs[variant]), strict=True))
        report["loops"][name] = row
        print(name, row, flush=True)
    write_report(report, args.out)


if __name__ == "__main__":
    main()
