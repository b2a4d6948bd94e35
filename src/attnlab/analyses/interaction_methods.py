"""Which explanation finds the interaction? What stage interaction_methods computes
(docs/interaction_methods.md): every attributed dev example's token-to-token interactions per
layer, by each method of `attnlab.methods.registry`, judged against the planted ground truth
and by faithfulness (attnlab.analyses.interaction_eval).

All methods score the first `examples` attributed examples — on a synthetic task, the first of
those a planted pair decides (the others have no ground truth) — unless capped lower: flow,
whose L·n² maximum-flow problems per example cost seconds each, scores only the first
`flow_examples`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformers import PreTrainedModel

from attnlab.analyses.interaction_eval import (
    RANDOM,
    claims,
    deletion_drops,
    deletion_summary,
    edge_order,
    ground_truth,
    ground_truth_summary,
    leaderboard,
)
from attnlab.engine.capture import Captured, capture
from attnlab.methods.attention_graph import head_mean
from attnlab.methods.method import GRADIENTS, DumpRow, Method
from attnlab.methods.registry import METHODS
from attnlab.plumbing.errors import AttnlabError


@dataclass(frozen=True)
class Comparison:
    """The methods on one task's examples."""

    scores: pd.DataFrame  # per example, method and layer: idx, n_tokens, the n·n scores
    ground_truth: pd.DataFrame  # per method and scope (interaction_eval.ground_truth_summary)
    deletion: pd.DataFrame  # per method and scope (interaction_eval.deletion_summary)
    curves: pd.DataFrame  # every example's deletion curves (interaction_eval.deletion_drops)
    leaderboard: pd.DataFrame  # per method, with its seconds per example
    claims: pd.DataFrame
    seconds: dict[str, float]  # per method, and for the deletion curves: over all examples


def scored_examples(dump: pd.DataFrame, dev: pd.DataFrame,
                    examples: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of a task's dumps that the methods score and their rows of the dev split, both
    indexed from 0: the first `examples` (all when None) of the dumps, on a synthetic task the
    first of those a planted pair decides."""
    # the dumps hold the dev split's first examples, in order
    dev = dev.iloc[: len(dump)].reset_index(drop=True)
    if "idx" in dev and not (dev["idx"].to_numpy() == dump["idx"].to_numpy()).all():
        raise AttnlabError("the attribution dumps are not of this dev split (rerun attribute)")
    if dump["planted_i"].notna().any():
        dump = dump[dump["planted_i"].notna()]
    dump = dump.iloc[:examples] if examples else dump
    dev = dev.loc[dump.index].reset_index(drop=True)
    return dump.reset_index(drop=True), dev


def score_example(
    model: PreTrainedModel,
    example: Captured,
    dump: DumpRow,
    *,
    methods: Sequence[Method],
    batch_size: int,
    seconds: dict[str, float],
) -> dict[str, np.ndarray]:
    """Each of `methods`' (L, n, n) scores of one example (`dump`: its row of the dumps), in
    their order; the time each timed method took is added to `seconds`."""
    sources: dict[str, Any] = {
        "attention": head_mean(example.probs.double().cpu().numpy()), "captured": example,
        "dump": dump, "model": model, "batch_size": batch_size}
    computed = {}
    # the methods that take gradients last: the time table lists the methods in this order
    for method in sorted(methods, key=lambda m: GRADIENTS in m.needs):
        start = time.perf_counter()
        with torch.set_grad_enabled(GRADIENTS in method.needs):
            computed[method.name] = method.score(
                **{need: sources[need] for need in method.needs - {GRADIENTS}})
        if method.timed:
            seconds[method.name] += time.perf_counter() - start
    return {method.name: computed[method.name] for method in methods}


def compare_methods(
    model: PreTrainedModel,
    encoded: dict[str, torch.Tensor],
    dump: pd.DataFrame,
    meta: dict[str, Any],
    *,
    limits: Mapping[str, int],
    deletion_steps: int,
    batch_size: int,
    seed: int,
    device: torch.device,
) -> Comparison:
    """Score, evaluate and compare every method on the examples of `dump` (`meta`: the dumps'
    shape), `encoded` their rows in the same order. A method named in `limits` scores only
    that many of the first examples; `batch_size` edge-masked copies run per forward pass."""
    counts = {method.name: min(limits.get(method.name, len(dump)), len(dump))
              for method in METHODS}
    seconds: dict[str, float] = defaultdict(float)
    score_rows, truth_rows, curves = [], [], []
    for row in tqdm(dump.itertuples(index=True), total=len(dump), desc="interactions",
                    mininterval=5):
        n = int(row.n_tokens)
        inputs = {k: v[row.Index : row.Index + 1, :n].to(device)
                  for k, v in encoded.items() if k != "labels"}
        if int(inputs["attention_mask"].sum()) != n:
            raise AttnlabError(f"example {row.idx}: the dump has {n} tokens, the tokenizer "
                               "another number (rerun attribute)")
        example = capture(model, inputs, int(row.target))
        scores = score_example(
            model, example, DumpRow(dump.loc[row.Index], meta["n_layers"], meta["n_heads"]),
            methods=[method for method in METHODS if row.Index < counts[method.name]],
            batch_size=batch_size, seconds=seconds)
        # random tie-breaks and the random order: one permutation per layer, seeded per example
        rng = np.random.default_rng([seed, int(row.idx)])
        ties = np.stack([rng.permutation(n * (n - 1)) for _ in range(meta["n_layers"])])
        for method, matrices in scores.items():
            score_rows += [{"idx": row.idx, "method": method, "layer": layer, "n_tokens": n,
                            "scores": matrix.ravel().astype(np.float32)}
                           for layer, matrix in enumerate(matrices)]
        if not pd.isna(row.planted_i):
            truth_rows += [{"idx": row.idx, **r} for r in ground_truth(
                scores, int(row.planted_i), int(row.planted_j), ties)]
        orders = {method: np.stack([edge_order(m, t) for m, t in zip(matrices, ties,
                                                                      strict=True)])
                  for method, matrices in scores.items()}
        orders[RANDOM] = np.stack([edge_order(np.zeros((n, n)), t) for t in ties])
        start = time.perf_counter()
        curves.append(deletion_drops(model, example, orders, deletion_steps, batch_size)
                      .assign(idx=row.idx))
        seconds["deletion curves (all methods)"] += time.perf_counter() - start

    truth = pd.DataFrame(truth_rows, columns=["idx", "method", "layer", "hit", "rank"])
    curves = pd.concat(curves, ignore_index=True)
    truth_summary = ground_truth_summary(truth)
    deletion = deletion_summary(curves)
    board = leaderboard(truth_summary, deletion)
    # an untimed method's seconds are 0, here and in `seconds`
    board["seconds_per_example"] = board["method"].map(
        lambda m: seconds[m] / counts[m] if counts.get(m) else float("nan"))
    return Comparison(scores=pd.DataFrame(score_rows), ground_truth=truth_summary,
                      deletion=deletion, curves=curves, leaderboard=board,
                      claims=pd.DataFrame(claims(truth_summary, deletion)), seconds=seconds)
