"""Which explanation finds the interaction? What stage interaction_methods computes
(docs/interaction_methods.md): every attributed dev example's token-to-token interactions per
layer, by each method of `attnlab.methods.registry`, judged against the planted ground truth
and by faithfulness (attnlab.analyses.interaction_eval), on the trained model and, as a sanity
row, on an untrained model of the same shape.

Every method scores the first `examples` attributed examples — on a synthetic task, the first
of those a planted pair decides (the others have no ground truth).
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

from attnlab.analyses import interaction_eval
from attnlab.analyses.interaction_eval import RANDOM, edge_order
from attnlab.engine import models
from attnlab.engine.capture import Captured, capture
from attnlab.methods.attention_graph import head_mean
from attnlab.methods.edge_masking import off_diagonal
from attnlab.methods.method import GRADIENTS, Method, Variants
from attnlab.plumbing.errors import AttnlabError

CAPTURE = "forward pass (every method)"


@dataclass(frozen=True)
class Options:
    """How the methods run and are judged (the config's interaction_methods section)."""

    methods: Sequence[Method]
    variants: Variants
    engine: Mapping[str, Any]  # attribution.engine_options of the run's attribution settings
    deletion_steps: int
    erasure_bins: Sequence[float]
    batch_size: int
    seed: int

    @classmethod
    def of(cls, methods: Sequence[Method], section: Mapping[str, Any],
           engine: Mapping[str, Any], *, seed: int) -> Options:
        """The options of the config's interaction_methods `section` (a dict or `Settings`)
        for `methods`, AttAttr's `engine` (batch_size resolved)."""
        return cls(methods=methods, variants=Variants(flow_normalised=section["flow_normalised"],
                                                      alti_biases=section["alti_biases"]),
                   engine=engine, deletion_steps=section["deletion_steps"],
                   erasure_bins=section["erasure_bins"], batch_size=section["batch_size"],
                   seed=seed)


@dataclass(frozen=True)
class Comparison:
    """The methods on one task's examples, on one model."""

    scores: pd.DataFrame  # per example, method and layer: idx, n_tokens, the n·n scores
    ground_truth: pd.DataFrame  # per method, layer and example: hit, rank
    curves: pd.DataFrame  # every example's deletion curves (interaction_eval.deletion_drops)
    erasure: pd.DataFrame  # every example's token erasure per bin (interaction_eval.erasure)
    seconds: dict[str, float]  # per method, over all examples, the forward pass included

    def per_example(self) -> pd.DataFrame:
        return interaction_eval.per_example(self.ground_truth, self.curves, self.erasure)


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
    settings: Options,
    seconds: dict[str, float],
) -> dict[str, np.ndarray]:
    """Each method's (L, n, n) scores of one example, in the order of settings.methods; the
    time each took is added to `seconds`."""
    sources: dict[str, Any] = {
        "attention": head_mean(example.probs.double().cpu().numpy()), "captured": example,
        "model": model, "engine": dict(settings.engine), "batch_size": settings.batch_size,
        "variants": settings.variants}
    computed = {}
    # the methods that take gradients last: the time table lists the methods in this order
    for method in sorted(settings.methods, key=lambda m: GRADIENTS in m.needs):
        start = time.perf_counter()
        with torch.set_grad_enabled(GRADIENTS in method.needs):
            computed[method.name] = method.score(
                **{need: sources[need] for need in method.needs - {GRADIENTS}})
        seconds[method.name] += time.perf_counter() - start
    return {method.name: computed[method.name] for method in settings.methods}


def compare_methods(
    model: PreTrainedModel,
    encoded: dict[str, torch.Tensor],
    dump: pd.DataFrame,
    settings: Options,
    *,
    special_ids: Sequence[int],
    device: torch.device,
    desc: str = "interactions",
) -> Comparison:
    """Score and evaluate every method on the examples of `dump`, `encoded` their rows in the
    same order; F is the probability of each example's `target` class."""
    seconds: dict[str, float] = defaultdict(float)
    score_rows, truth_rows, curves, erased = [], [], [], []
    pad_id = model.config.pad_token_id or 0
    causal = models.family_of(model).causal
    for row in tqdm(dump.itertuples(index=True), total=len(dump), desc=desc, mininterval=5):
        n = int(row.n_tokens)
        inputs = {k: v[row.Index : row.Index + 1, :n].to(device)
                  for k, v in encoded.items() if k != "labels"}
        if int(inputs["attention_mask"].sum()) != n:
            raise AttnlabError(f"example {row.idx}: the dump has {n} tokens, the tokenizer "
                               "another number (rerun attribute)")
        start = time.perf_counter()
        example = capture(model, inputs, int(row.target))
        forward = time.perf_counter() - start
        for method in settings.methods:  # every method needs the forward pass
            seconds[method.name] += forward
        scores = score_example(model, example, settings, seconds)
        # random tie-breaks and the random order: one permutation per layer, seeded per example
        rng = np.random.default_rng([settings.seed, int(row.idx)])
        edges = len(off_diagonal(n, causal))  # a decoder's: i > j only
        ties = np.stack([rng.permutation(edges) for _ in range(example.probs.shape[0])])
        for method, matrices in scores.items():
            score_rows += [{"idx": row.idx, "method": method, "layer": layer, "n_tokens": n,
                            "scores": matrix.ravel().astype(np.float32)}
                           for layer, matrix in enumerate(matrices)]
        if not pd.isna(row.planted_i):
            truth_rows += [{"idx": row.idx, **r} for r in interaction_eval.ground_truth(
                scores, int(row.planted_i), int(row.planted_j), ties, causal)]
        orders = {method: np.stack([edge_order(m, t, causal) for m, t in zip(matrices, ties,
                                                                              strict=True)])
                  for method, matrices in scores.items()}
        orders[RANDOM] = np.stack([edge_order(np.zeros((n, n)), t, causal) for t in ties])
        curves.append(interaction_eval.deletion_drops(
            model, example, orders, settings.deletion_steps, settings.batch_size)
            .assign(idx=row.idx))
        position = models.classified_position(model, n)
        importance = {method: matrices[-1, position] for method, matrices in scores.items()}
        importance[RANDOM] = rng.permutation(n).astype(float)
        ordinary = ~np.isin(inputs["input_ids"][0].cpu().numpy(), list(special_ids))
        ordinary[position] = False  # the position read stays (an encoder's [CLS] is special)
        erased.append(interaction_eval.erasure(
            model, example, importance, ordinary=ordinary, bins=settings.erasure_bins,
            pad_id=pad_id).assign(idx=row.idx))
    truth = pd.DataFrame(truth_rows, columns=["idx", "method", "layer", "hit", "rank"])
    return Comparison(scores=pd.DataFrame(score_rows), ground_truth=truth,
                      curves=pd.concat(curves, ignore_index=True),
                      erasure=pd.concat(erased, ignore_index=True), seconds=dict(seconds))


@dataclass(frozen=True)
class Summary:
    """Both models' comparisons, summarised with intervals (column `model`: trained or
    untrained)."""

    intervals: pd.DataFrame  # per model, method and measure (interaction_eval.intervals)
    pairs: pd.DataFrame  # per model, measure and pair of methods (interaction_eval.pairs)
    ground_truth: pd.DataFrame  # per model, method and scope (ground_truth_summary)
    deletion: pd.DataFrame  # per model, method and scope (deletion_summary)
    erasure: pd.DataFrame  # per model, method and bin: mean comprehensiveness, sufficiency
    leaderboard: pd.DataFrame  # per method: each measure's mean and interval, both models
    claims: pd.DataFrame  # judged on the trained model


def summarise(comparisons: Mapping[str, Comparison], *, reps: int, seed: int) -> Summary:
    """Intervals, pairs, tables and claims of the comparisons by model ("trained" first)."""
    tables: dict[str, list[pd.DataFrame]] = defaultdict(list)
    for name, comparison in comparisons.items():
        values = comparison.per_example()
        tables["intervals"].append(interaction_eval.intervals(values, reps=reps, seed=seed)
                                   .assign(model=name))
        tables["pairs"].append(interaction_eval.pairs(values, reps=reps, seed=seed)
                               .assign(model=name))
        tables["ground_truth"].append(interaction_eval.ground_truth_summary(
            comparison.ground_truth).assign(model=name))
        tables["deletion"].append(interaction_eval.deletion_summary(comparison.curves)
                                  .assign(model=name))
        tables["erasure"].append(comparison.erasure.groupby(["method", "bin"], sort=False)[
            ["comprehensiveness", "sufficiency"]].mean().reset_index().assign(model=name))
    joined = {name: pd.concat(frames, ignore_index=True) for name, frames in tables.items()}
    trained = joined["intervals"][joined["intervals"]["model"] == "trained"]
    compared = joined["pairs"][joined["pairs"]["model"] == "trained"]
    return Summary(**joined, leaderboard=leaderboard(joined["intervals"],
                                                     comparisons["trained"].seconds,
                                                     examples=trained["examples"].max()),
                   claims=pd.DataFrame(interaction_eval.claims(trained, compared)))


def leaderboard(table: pd.DataFrame, seconds: Mapping[str, float], *,
                examples: int) -> pd.DataFrame:
    """One row per method: each measure as "mean [low, high]" on the trained model and on the
    untrained one, and its seconds per example; ordered by the trained model's deletion AOPC
    on the direction-free measure."""
    cells = table.assign(cell=[f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in
                               zip(table["mean"], table["low"], table["high"], strict=True)],
                         column=table["measure"] + " (" + table["model"] + ")")
    wide = cells.pivot(index="method", columns="column", values="cell")
    order = (table[(table["model"] == "trained") & (table["measure"] == "deletion_tv")]
             .sort_values("mean", ascending=False)["method"])
    columns = [f"{measure} ({model})" for measure in interaction_eval.MEASURES
               for model in ("trained", "untrained") if f"{measure} ({model})" in wide]
    board = wide.loc[list(order), columns].reset_index()
    board["seconds_per_example"] = board["method"].map(
        lambda m: seconds[m] / examples if m in seconds else float("nan"))
    return board
