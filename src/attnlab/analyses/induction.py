"""What attribution finds in a decoder trained on the planted induction task, against its truth.

On "… A B … A" -> B (attnlab.data.induction) the mechanism is known (Olsson et al. 2022): an
induction head at the last A reads B's first position, which a previous-token head at B made
to hold "A came before me". So:

* Edges: at the query (the last A), which key does a method's strongest edge point to? The
  truth is B's first position. Each method's map is summed over heads, its strongest edge
  taken over every layer (rollout: its last layer, the whole stack's mixing), the query's edge
  to itself left out (every method gives the residual stream's own token a large share).
* The path: the first step, a previous-token head at B reading A, is the edge of the
  attribution tree (Hao et al. 2021) below the induction edge. The induction edge's layer is
  the one where AttAttr's edge from the query to B is strongest; the step is sought in the
  layers below it (layer 0 of the planted task's 2-layer model; SmolLM2's previous-token heads
  sit in several layers below its induction heads). Is a method's strongest edge there (over
  all its query rows and those layers, heads summed) the edge from B to A?
* Heads: an induction head puts on average at least half of its attention at the query on B,
  a previous-token head at least half of its attention at B on A; AttAttr ranks the heads by
  their mean maximal attribution (Hao et al. 2021's head importance). Are its top two heads
  of these kinds, and does masking them cost more next-token accuracy than masking any two
  other heads?

Each is a finding over the examples (attnlab.analyses.verdicts): a share of examples with its
bootstrap interval, a comparison of two methods (or of two maskings) as the paired interval of
their difference on the same examples, and the top two heads as the share of them that are
mechanism heads, the ranking and the kinds recomputed on every resample of the examples.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.analyses.claims import NotTestable, claims_frame, finding, source
from attnlab.analyses.trees import tree_from_matrix
from attnlab.analyses.verdicts import (
    ONE_POINT,
    SIGNED_UNIT,
    UNIT,
    Bar,
    bootstrap,
    difference,
    share,
)
from attnlab.engine import models
from attnlab.engine.intervention import Intervention
from attnlab.methods.attention_graph import head_mean
from attnlab.methods.rollout import rollout

STAGE = "induction"
METHODS = ("attattr", "attention", "rollout")
# AttAttr's strongest edge at the query must point to B in more than 90 % of the examples (our
# bar: the model is right on about all of them, and it can only be right by reading B)
EDGE_SHARE = 0.9
# a comparison holds when the paired interval of the difference lies above one point
BEATS = Bar(ONE_POINT)
# the two heads of the mechanism (an induction and a previous-token head)
MECHANISM_HEADS = 2
# a head is an induction (previous-token) head when on average it puts at least half of its
# attention at the query on B (at B on A); the trained models' put 0.75-0.96 there, the other
# heads at most 0.25
MECHANISM_SCORE = 0.5
# Masking every pair of other heads is one forward pass per pair: 28 for the planted task's 8
# heads, 36,000 for SmolLM2-135M's 270. Above this many heads the comparison is not run (rule
# induction_heads ablates the top heads of each ranking against random and lowest ones).
PAIR_MASKING_HEADS = 100
# the attribution tree keeps the edges above 0.4 of their layer's maximum (Hao et al. 2021's
# tau, the trees stage's default)
TREE_TAU = 0.4


class Masking(NamedTuple):
    """Which examples the model predicts right: whole, with AttAttr's top two heads masked, and
    with the other pair whose masking costs the most accuracy (boolean, one per example)."""

    full: np.ndarray
    top: np.ndarray
    worst_other: np.ndarray
    other_mean_drop: float


class InductionResult(NamedTuple):
    # one row per example: its query, B's position, each method's top key at the query and
    # whether its strongest edge below the induction edge's layer is B reading A
    edges: pd.DataFrame
    heads: pd.DataFrame  # one row per head: its scores, AttAttr rank, mechanism membership
    claims: pd.DataFrame
    summary: dict[str, float]  # accuracy, the masking drops and each method's share


def top_edge(scores: np.ndarray) -> tuple[int, int]:
    """(query, key) of the strongest edge of (n, n) scores."""
    query, key = np.unravel_index(np.argmax(scores), scores.shape)
    return int(query), int(key)


def top_keys(scores: np.ndarray, query: int) -> int:
    """The key of the strongest edge at `query` over every layer of (L, n, n) scores, the
    query's edge to itself left out."""
    row = scores[:, query, :].copy()
    row[:, query] = -np.inf
    return int(np.unravel_index(np.argmax(row), row.shape)[1])


def _correct(model: PreTrainedModel, inputs: dict[str, torch.Tensor],
             head_mask: torch.Tensor | None = None) -> np.ndarray:
    """Whether the model predicts each example's target (with `head_mask`'s heads masked)."""
    with torch.no_grad():
        logits = models.logits(model, inputs, Intervention(head_mask=head_mask))
    return (logits.argmax(-1).cpu() == inputs["labels"].cpu()).numpy()


def _mask(shape: tuple[int, int], heads: list[tuple[int, int]]) -> torch.Tensor:
    mask = torch.ones(shape)
    for layer, head in heads:
        mask[layer, head] = 0.0
    return mask


def induction_analysis(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    *,
    attr: np.ndarray,
    induction: torch.Tensor,
    previous: torch.Tensor,
) -> InductionResult:
    """The edges, heads and claims of the induction analysis (the module's docstring).

    `inputs` are prompts as the attribution engine takes them (`next_token.prompt_inputs`:
    right-padded, `labels` the target tokens) and `attr` their attributions (B, L, H, T, T),
    rule attribute's (`dumps.full_attributions`); `induction` and `previous` are each
    example's token positions of B's and A's first occurrence."""
    attr = attr.astype(np.float64)
    attention = attention_probabilities(model, inputs)
    queries = inputs["attention_mask"].sum(dim=1).cpu().numpy() - 1  # each prompt's last token
    b, a = induction.numpy(), previous.numpy()
    edges = edge_table(attr, attention, queries, b, a)
    per_example = head_scores(attr, attention, queries, b, a)
    heads = head_table(per_example, n_heads=attention.shape[2])
    top_heads = [(int(r.layer), int(r.head))
                 for r in heads.nsmallest(MECHANISM_HEADS, "attattr_rank").itertuples()]
    shape = attention.shape[1:3]
    masking = (masked(model, inputs, top_heads, shape=shape)
               if shape[0] * shape[1] <= PAIR_MASKING_HEADS else None)
    heads["in_attattr_top"] = [(r.layer, r.head) in top_heads for r in heads.itertuples()]
    full = float(_correct(model, inputs).mean())
    drops = {} if masking is None else {"top_heads_drop": full - float(masking.top.mean()),
                                        "other_pairs_mean_drop": masking.other_mean_drop}
    summary = {"accuracy": full, **drops, **edge_shares(edges)}
    claims = induction_findings(edges, per_example, masking)
    return InductionResult(edges, heads, claims_frame(claims), summary)


def attention_probabilities(model: PreTrainedModel,
                            inputs: dict[str, torch.Tensor]) -> np.ndarray:
    """The attention probabilities of every layer of `inputs` (one forward pass) as
    (B, L, H, T, T), float64."""
    seen = Intervention(capture=True)
    with torch.no_grad():
        models.logits(model, inputs, seen)
    return torch.stack([seen.probs[layer] for layer in sorted(seen.probs)],
                       dim=1).double().cpu().numpy()


def edge_table(attr: np.ndarray, attention: np.ndarray, queries: np.ndarray, b: np.ndarray,
               a: np.ndarray) -> pd.DataFrame:
    """One row per example (attributions and attention (B, L, H, T, T), its query position, B's
    and A's first positions): each method's top key at the query, the induction edge's layer
    (where AttAttr's edge from the query to B is strongest), whether each method's strongest
    edge in the layers below it is B reading A, and the attribution tree's top node and
    whether it takes that path. Both methods are read in AttAttr's layers below, so that they
    are compared on the same edges; an induction edge in layer 0 leaves no layer for the
    step."""
    rows = []
    for i, query in enumerate(queries.tolist()):
        n = query + 1
        probs = attention[i, :, :, :n, :n]
        maps = {"attattr": attr[i, :, :, :n, :n].sum(axis=1), "attention": probs.sum(axis=1),
                "rollout": rollout(head_mean(probs))[-1:]}
        step = (int(b[i]), int(a[i]))
        below = int(np.argmax(maps["attattr"][:, query, step[0]]))
        # the tree's root is the query, which the next-token prediction reads as a classifier
        # reads [CLS]; it joins every node, so B in the tree with the flow edge B <- A below
        # the induction edge's layer is the path query <- B <- A
        tree = tree_from_matrix(maps["attattr"], TREE_TAU, "layer", root=query)
        rows.append({"example": i, "query": query, "induction": int(b[i]),
                     **{f"top_{name}": top_keys(scores, query) for name, scores in maps.items()},
                     "induction_layer": below,
                     **{f"path_{name}": below > 0
                        and top_edge(maps[name][:below].max(axis=0)) == step
                        for name in ("attattr", "attention")},
                     "tree_top": tree.top, "tree_path": any(
                         layer < below and (parent, child) == step
                         for layer, parent, child, _ in tree.edges)})
    return pd.DataFrame(rows)


def edge_shares(edges: pd.DataFrame) -> dict[str, float]:
    """The shares of examples (rows of `edge_table`) whose strongest edge at the query points
    to B (share_<method>), whose strongest edge below the induction edge's layer is B reading
    A (path_share_<method>), and whose tree takes that path (tree_share)."""
    return {**{f"share_{name}": float((edges[f"top_{name}"] == edges["induction"]).mean())
               for name in METHODS},
            **{f"path_share_{name}": float(edges[f"path_{name}"].mean())
               for name in ("attattr", "attention")},
            "tree_share": float(edges["tree_path"].mean())}


def head_scores(attr: np.ndarray, attention: np.ndarray, queries: np.ndarray, b: np.ndarray,
                a: np.ndarray) -> np.ndarray:
    """Per example and head (examples, 3, layers · heads): its maximal attribution, its
    attention at the query on B and its attention at B on A (attributions and attention
    (B, L, H, T, T), each example's query, B's and A's first positions)."""
    n_ex = attention.shape[0]
    picks = np.arange(n_ex)
    return np.stack([attr.reshape(*attr.shape[:3], -1).max(axis=-1),
                     attention[picks, :, :, queries, b],
                     attention[picks, :, :, b, a]], axis=1).reshape(n_ex, 3, -1)


def head_table(per_example: np.ndarray, n_heads: int) -> pd.DataFrame:
    """One row per head of `head_scores` (`n_heads` a layer), in (layer, head) order: its mean
    attention at the query on B (induction score) and at B on A (previous-token score), its
    mean maximal attribution and AttAttr's rank by it, and whether it is an induction or a
    previous-token head."""
    importance, induction_score, previous_score = per_example.mean(axis=0)
    heads = pd.DataFrame({
        "layer": np.arange(len(importance)) // n_heads,
        "head": np.arange(len(importance)) % n_heads,
        "induction_score": induction_score, "previous_token_score": previous_score,
        "attattr_importance": importance})
    heads["attattr_rank"] = heads["attattr_importance"].rank(ascending=False, method="first")
    heads = heads.astype({"attattr_rank": "int64"})
    heads["induction_head"] = heads["induction_score"] >= MECHANISM_SCORE
    heads["previous_token_head"] = heads["previous_token_score"] >= MECHANISM_SCORE
    return heads


def mechanism_share(sample: np.ndarray) -> np.ndarray:
    """The share of AttAttr's top two heads that are induction or previous-token heads, on
    each resample (resamples, examples, 3, heads) of `head_scores`: heads ranked by their mean
    maximal attribution and judged by their mean attention over the resample's examples."""
    means = sample.mean(axis=1)  # (resamples, 3, heads)
    top = np.argsort(-means[:, 0], axis=1, kind="stable")[:, :MECHANISM_HEADS]
    kinds = np.take_along_axis(means[:, 1:], top[:, None, :], axis=2) >= MECHANISM_SCORE
    # of either kind: a model may grow two heads of one kind that do the same (seed 1's two
    # previous-token heads), so one of each is not asked
    return kinds.any(axis=1).mean(axis=1)


def masked(model: PreTrainedModel, inputs: dict[str, torch.Tensor],
           top_heads: list[tuple[int, int]], *, shape: tuple[int, int]) -> Masking:
    """Which examples the model predicts right whole, with `top_heads` masked, and with the
    other pair of heads whose masking costs the most accuracy (`shape`: layers, heads), and
    the mean accuracy drop over all other pairs."""
    full = _correct(model, inputs)
    top = _correct(model, inputs, _mask(shape, top_heads))
    others = [h for h in itertools.product(*map(range, shape)) if h not in top_heads]
    pairs = [_correct(model, inputs, _mask(shape, list(pair)))
             for pair in itertools.combinations(others, MECHANISM_HEADS)]
    worst = min(pairs, key=lambda correct: correct.mean())
    return Masking(full, top, worst,
                   float(full.mean() - np.mean([pair.mean() for pair in pairs])))


def induction_findings(edges: pd.DataFrame, per_example: np.ndarray,
                       masking: Masking | None) -> list[dict[str, Any]]:
    """The stage's findings over the examples of `edges` (`edge_table`), the heads' scores per
    example (`head_scores`) and the `masking` of AttAttr's top two heads against the other
    pair that costs most (chosen on these examples: a bias against the finding; None where
    the model has more than PAIR_MASKING_HEADS heads)."""
    hit = {name: (edges[f"top_{name}"] == edges["induction"]).to_numpy(float)
           for name in METHODS}
    path = {name: edges[f"path_{name}"].to_numpy(float) for name in ("attattr", "attention")}
    above = Bar(EDGE_SHARE)
    olsson, hao = "olsson2022", "hao2021"
    return [
        finding(STAGE, "AttAttr's strongest edge at the second A points to B's first position",
                "share of examples (bar ours)", share(hit["attattr"]), above,
                source(olsson, "induction_heads")),
        finding(STAGE, "AttAttr's strongest edge finds B more often than raw attention's",
                "share AttAttr - share attention, paired", difference(
                    hit["attattr"], hit["attention"], paired=True, scale=SIGNED_UNIT), BEATS,
                source(hao, "attention_differs")),
        finding(STAGE, "AttAttr's strongest edge finds B more often than rollout's",
                "share AttAttr - share rollout, paired", difference(
                    hit["attattr"], hit["rollout"], paired=True, scale=SIGNED_UNIT), BEATS,
                source(hao, "attention_differs")),
        finding(STAGE, "AttAttr's strongest edge below the induction edge's layer is B's first "
                "position reading A (the previous-token step)", "share of examples (bar ours)",
                share(path["attattr"]), above, source(olsson, "previous_token_heads")),
        finding(STAGE, "AttAttr's strongest edge below the induction edge's layer is that step "
                "more often than raw attention's", "share AttAttr - share attention, paired",
                difference(path["attattr"], path["attention"], paired=True,
                           scale=SIGNED_UNIT), BEATS,
                source(hao, "attention_differs")),
        finding(STAGE, "AttAttr's attribution tree joins the second A to B through B reading A "
                "below the induction edge's layer", "share of examples (bar ours)",
                share(edges["tree_path"].to_numpy(float)), above,
                source(hao, "tree_hierarchy")),
        finding(STAGE, "AttAttr's top two heads are induction or previous-token heads",
                "share of the top two that are (0, 0.5 or 1: above 0.5 is both)",
                bootstrap(per_example, mechanism_share, scale=UNIT), Bar(0.5),
                source(hao, "important_heads")),
        finding(STAGE, "Masking AttAttr's top two heads costs more next-token accuracy than "
                "masking any two other heads", "accuracy drop, top two - costliest other pair, "
                "paired", NotTestable(
                    f"more than {PAIR_MASKING_HEADS} heads: a forward pass per pair of them; "
                    "rule induction_heads ablates each ranking's top heads instead")
                if masking is None else difference(masking.worst_other.astype(float),
                                                   masking.top.astype(float), paired=True,
                                                   scale=SIGNED_UNIT),
                BEATS, source(hao, "important_heads")),
    ]
