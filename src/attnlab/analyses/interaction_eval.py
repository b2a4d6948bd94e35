"""How good is a token-interaction method: against the planted ground truth, and by
faithfulness (deletion curves), per method, layer and task.

Only the n(n−1) edges i → j with i ≠ j of a layer are ranked (a token's interaction with itself
is no interaction). Ties are broken in a random order drawn per example and layer (seeded),
the same for every method; the random baseline ranks the edges in that order.

Ground truth (synthetic tasks: examples whose label a planted token pair (a, b) decides):
    hit       the strongest edge of the layer joins the pair ({i, j} = {a, b}); for the scope
              "any", the strongest edge of some layer does.
    rank      the rank of the better of the edges a → b and b → a (1 = strongest; tied scores
              share the middle rank of their block); for "any", the best rank over the layers.
    reported  share of hits, median rank and MRR (mean of 1/rank) over the examples.

Faithfulness (every example): delete (zero in every head, via the intervention point) the
method's top-k edges of one layer, or of every layer at once (the top k of each layer by that
layer's scores), and measure drop_k = F(A) − F(A with them deleted), k = 1..K. The area over
the perturbation curve (Samek et al. 2017, "Evaluating the Visualization of What a Deep Neural
Network Has Learned", IEEE TNNLS) is AOPC = 1/(K+1) Σ_{k=0}^{K} drop_k (drop_0 = 0), averaged
over the examples; the random edge order gives its floor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.analyses.claims import claim
from attnlab.engine.capture import Captured
from attnlab.methods.edge_masking import masked_f, off_diagonal

RANDOM = "random"
ANY = "any"  # the ground-truth scope "the strongest edge of some layer"
ALL = "all"  # the deletion scope "every layer at once"


def edge_order(scores: np.ndarray, ties: np.ndarray) -> np.ndarray:
    """Flat indices i·n + j (i ≠ j) of an (n, n) score matrix, strongest first; equal scores
    in the order of `ties` (a permutation of the n(n−1) edges)."""
    edges = off_diagonal(scores.shape[0]).numpy()
    return edges[np.lexsort((ties, -scores.ravel()[edges]))]


def planted_rank(scores: np.ndarray, a: int, b: int) -> float:
    """The rank of the better of the edges a → b and b → a among a layer's edges i ≠ j."""
    values = scores.ravel()[off_diagonal(scores.shape[0]).numpy()]
    ranks = [1 + (values > s).sum() + ((values == s).sum() - 1) / 2
             for s in (scores[a, b], scores[b, a])]
    return float(min(ranks))


def ground_truth(scores: dict[str, np.ndarray], a: int, b: int,
                 ties: np.ndarray) -> list[dict[str, Any]]:
    """Per method and layer of one example: hit and rank (`ties`: (L, n(n−1)))."""
    rows = []
    for method, matrices in scores.items():
        for layer, matrix in enumerate(matrices):
            strongest = edge_order(matrix, ties[layer])[0]
            i, j = divmod(int(strongest), matrix.shape[0])
            rows.append({"method": method, "layer": layer, "hit": {i, j} == {a, b},
                         "rank": planted_rank(matrix, a, b)})
    return rows


def ground_truth_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Share of hits, median rank and MRR per method and scope (each layer, and "any")."""
    per_example = rows.groupby(["method", "idx"], sort=False).agg(
        hit=("hit", "any"), rank=("rank", "min")).reset_index()
    scoped = pd.concat([rows.assign(scope=rows["layer"].astype(str)),
                        per_example.assign(scope=ANY)], ignore_index=True)
    return (scoped.assign(reciprocal=1 / scoped["rank"])
            .groupby(["method", "scope"], sort=False)
            .agg(examples=("idx", "nunique"), hit_share=("hit", "mean"),
                 median_rank=("rank", "median"), mrr=("reciprocal", "mean"))
            .reset_index())


def deletion_drops(
    model: PreTrainedModel,
    example: Captured,
    orders: dict[str, np.ndarray],
    steps: int,
    batch_size: int,
) -> pd.DataFrame:
    """drop_k, k = 1..K (K = min(steps, n(n−1))), of one example for every method (orders:
    (L, n(n−1)) edge orders by method) and scope (each layer, and "all")."""
    n = example.n_tokens
    n_layers = example.probs.shape[0]
    k = torch.arange(1, min(steps, n * (n - 1)) + 1)
    methods = list(orders)
    keep = {}  # layer -> (methods · K, n, n)
    for layer in range(n_layers):
        position = torch.full((len(methods), n * n), n * n)  # the diagonal is never deleted
        for m, method in enumerate(methods):
            order = torch.as_tensor(orders[method][layer])
            position[m, order] = torch.arange(len(order))
        mask = position[:, None, :] >= k[None, :, None]  # deleted: among the top k
        keep[layer] = mask.view(-1, n, n).to(example.probs)
    frames = []
    scopes = [(str(layer), {layer: keep[layer]}) for layer in range(n_layers)]
    for scope, masks in [*scopes, (ALL, keep)]:
        drop = example.f_full - masked_f(model, example, masks, batch_size).cpu().numpy()
        frames.append(pd.DataFrame({"method": np.repeat(methods, len(k)), "scope": scope,
                                    "k": np.tile(k.numpy(), len(methods)), "drop": drop}))
    return pd.concat(frames, ignore_index=True)


def deletion_summary(curves: pd.DataFrame) -> pd.DataFrame:
    """AOPC per method and scope, beside the random order's on the same examples (flow
    scores fewer examples than the others)."""
    per_example = curves.groupby(["method", "scope", "idx"], sort=False).agg(
        total=("drop", "sum"), steps=("k", "max")).reset_index()
    per_example["aopc"] = per_example["total"] / (per_example["steps"] + 1)
    floor = (per_example[per_example["method"] == RANDOM]
             .set_index(["scope", "idx"])["aopc"].rename("aopc_random"))
    per_example = per_example.join(floor, on=["scope", "idx"])
    table = (per_example.groupby(["method", "scope"], sort=False)
             .agg(examples=("idx", "nunique"), aopc=("aopc", "mean"),
                  aopc_random=("aopc_random", "mean")).reset_index())
    table["aopc_over_random"] = table["aopc"] - table["aopc_random"]
    return table


def leaderboard(truth: pd.DataFrame, deletion: pd.DataFrame) -> pd.DataFrame:
    """One row per method: planted-pair hits and MRR (some layer), AOPC (all layers at once)
    and its margin over random edges; ordered by hit share, then AOPC."""
    gt = truth[truth["scope"] == ANY].set_index("method")[
        ["examples", "hit_share", "median_rank", "mrr"]].add_prefix("planted_")
    faith = deletion[deletion["scope"] == ALL].set_index("method")[
        ["examples", "aopc", "aopc_over_random"]].add_prefix("deletion_")
    table = gt.join(faith, how="outer").reset_index()
    return table.sort_values(["planted_hit_share", "deletion_aopc"], ascending=False,
                             na_position="last", ignore_index=True)


def _value(table: pd.DataFrame, method: str, scope: str, column: str) -> float:
    rows = table[(table["method"] == method) & (table["scope"] == scope)]
    return float(rows[column].iloc[0]) if len(rows) else float("nan")


def claims(truth: pd.DataFrame, deletion: pd.DataFrame) -> list[dict[str, Any]]:
    """AttAttr against attention and against random edges, judged on one task's tables."""
    stage = "interaction_methods"

    def versus(table, column, scope, other="attention"):
        value = (_value(table, "attattr", scope, column)
                 - _value(table, other, scope, column))
        return value, None if np.isnan(value) else bool(value > 0)

    hits, hits_hold = versus(truth, "hit_share", ANY)
    mrr, mrr_hold = versus(truth, "mrr", ANY)
    aopc, aopc_hold = versus(deletion, "aopc", ALL)
    floor, floor_hold = versus(deletion, "aopc", ALL, RANDOM)
    return [
        claim(stage, "AttAttr recovers the planted pair more often than attention",
              "share of planted examples whose strongest edge of some layer joins the pair, "
              "AttAttr minus attention (holds if > 0)", hits, hits_hold),
        claim(stage, "AttAttr ranks the planted edge higher than attention",
              "MRR of the planted edge (best layer), AttAttr minus attention (holds if > 0)",
              mrr, mrr_hold),
        claim(stage, "AttAttr's deletion curve falls faster than attention's",
              "AOPC, top-k edges of every layer deleted, AttAttr minus attention "
              "(holds if > 0)", aopc, aopc_hold),
        claim(stage, "AttAttr's deletion curve falls faster than random edges'",
              "AOPC, top-k edges of every layer deleted, AttAttr minus random order "
              "(holds if > 0)", floor, floor_hold),
    ]
