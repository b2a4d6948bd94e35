"""What attribution finds in a decoder trained on the planted induction task, against its truth.

On "… A B … A" -> B (attnlab.data.induction) the mechanism is known (Olsson et al. 2022): an
induction head at the last A reads B's first position, which a previous-token head at B made
to hold "A came before me". So:

* Edges: at the query (the last A), which key does a method's strongest edge point to? The
  truth is B's first position. Each method's map is summed over heads, its strongest edge
  taken over every layer (rollout: its last layer, the whole stack's mixing), the query's edge
  to itself left out (every method gives the residual stream's own token a large share).
* The path: the first step, a previous-token head at B reading A in layer 0, is the first edge
  of the attribution tree (Hao et al. 2021) below the induction edge. Is a method's strongest
  layer-0 edge (over all its query rows, heads summed) the edge from B to A?
* Heads: an induction head puts on average at least half of its attention at the query on B,
  a previous-token head at least half of its attention at B on A; AttAttr ranks the heads by
  their mean maximal attribution (Hao et al. 2021's head importance). Are its top two heads
  of these kinds, and does masking them cost more next-token accuracy than masking any two
  other heads?
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.analyses.claims import claim, claims_frame
from attnlab.analyses.trees import tree_from_matrix
from attnlab.engine import attribution, models
from attnlab.engine.intervention import Intervention
from attnlab.methods.attention_graph import head_mean
from attnlab.methods.rollout import rollout

STAGE = "induction"
METHODS = ("attattr", "attention", "rollout")
# AttAttr's strongest edge at the query must point to B in at least 90 % of the examples: the
# model is right on about all of them, and it can only be right by reading B
EDGE_SHARE = 0.9
# the two heads of the mechanism (an induction and a previous-token head)
MECHANISM_HEADS = 2
# a head is an induction (previous-token) head when on average it puts at least half of its
# attention at the query on B (at B on A); the trained models' put 0.75-0.96 there, the other
# heads at most 0.25
MECHANISM_SCORE = 0.5
# the attribution tree keeps the edges above 0.4 of their layer's maximum (Hao et al. 2021's
# tau, the trees stage's default)
TREE_TAU = 0.4


class InductionResult(NamedTuple):
    # one row per example: its query, B's position, each method's top key at the query and
    # whether its strongest layer-0 edge is B reading A
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


def _accuracy(model: PreTrainedModel, inputs: dict[str, torch.Tensor],
              head_mask: torch.Tensor | None = None) -> float:
    with torch.no_grad():
        logits = models.logits(model, inputs, Intervention(head_mask=head_mask))
    return float((logits.argmax(-1).cpu() == inputs["labels"].cpu()).double().mean())


def _mask(shape: tuple[int, int], heads: list[tuple[int, int]]) -> torch.Tensor:
    mask = torch.ones(shape)
    for layer, head in heads:
        mask[layer, head] = 0.0
    return mask


def induction_analysis(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    *,
    induction: torch.Tensor,
    previous: torch.Tensor,
    engine: dict[str, Any],
) -> InductionResult:
    """The edges, heads and claims of the induction analysis (the module's docstring).

    `inputs` are prompts as the attribution engine takes them (`next_token.prompt_inputs`:
    right-padded, `labels` the target tokens); `induction` and `previous` are each example's
    token positions of B's and A's first occurrence; `engine` the engine's options
    (`attribution.engine_options`)."""
    result = attribution.attribute(model, inputs, target=inputs["labels"], **engine)
    attr = result.attr.double().cpu().numpy()
    attention = result.attention.double().cpu().numpy()
    queries = inputs["attention_mask"].sum(dim=1).cpu().numpy() - 1  # each prompt's last token
    b, a = induction.numpy(), previous.numpy()
    edges = edge_table(attr, attention, queries, b, a)
    heads = head_table(attr, attention, queries, b, a)
    top_heads = [(int(r.layer), int(r.head))
                 for r in heads.nsmallest(MECHANISM_HEADS, "attattr_rank").itertuples()]
    full, top_drop, other_drops = masking_drops(model, inputs, top_heads,
                                                shape=attention.shape[1:3])
    heads["in_attattr_top"] = [(r.layer, r.head) in top_heads for r in heads.itertuples()]
    # of either kind: a model may grow two heads of one kind that do the same (seed 1's two
    # previous-token heads), so one of each is not asked
    top = heads[heads["in_attattr_top"]]
    found = int((top["induction_head"] | top["previous_token_head"]).sum())
    shares = edge_shares(edges)
    summary = {"accuracy": full, "top_heads_drop": top_drop,
               "other_pairs_mean_drop": float(np.mean(other_drops)), **shares}
    claims = induction_claims(shares, found=found, top_drop=top_drop,
                              other_drop=max(other_drops))
    return InductionResult(edges, heads, claims_frame(claims), summary)


def edge_table(attr: np.ndarray, attention: np.ndarray, queries: np.ndarray, b: np.ndarray,
               a: np.ndarray) -> pd.DataFrame:
    """One row per example (attributions and attention (B, L, H, T, T), its query position, B's
    and A's first positions): each method's top key at the query, whether its strongest
    layer-0 edge is B reading A, and the attribution tree's top node and whether it takes that
    path."""
    rows = []
    for i, query in enumerate(queries.tolist()):
        n = query + 1
        probs = attention[i, :, :, :n, :n]
        maps = {"attattr": attr[i, :, :, :n, :n].sum(axis=1), "attention": probs.sum(axis=1),
                "rollout": rollout(head_mean(probs))[-1:]}
        step = (int(b[i]), int(a[i]))
        # the tree's root is the query, which the next-token prediction reads as a classifier
        # reads [CLS]; it joins every node, so B in the tree with the flow edge B <- A in
        # layer 0 is the path query <- B <- A
        tree = tree_from_matrix(maps["attattr"], TREE_TAU, "layer", root=query)
        rows.append({"example": i, "query": query, "induction": int(b[i]),
                     **{f"top_{name}": top_keys(scores, query) for name, scores in maps.items()},
                     **{f"path_{name}": top_edge(maps[name][0]) == step
                        for name in ("attattr", "attention")},
                     "tree_top": tree.top, "tree_path": (0, *step) in
                     [(layer, parent, child) for layer, parent, child, _ in tree.edges]})
    return pd.DataFrame(rows)


def edge_shares(edges: pd.DataFrame) -> dict[str, float]:
    """The shares of examples (rows of `edge_table`) whose strongest edge at the query points
    to B (share_<method>), whose strongest layer-0 edge is B reading A (path_share_<method>),
    and whose tree takes that path (tree_share)."""
    return {**{f"share_{name}": float((edges[f"top_{name}"] == edges["induction"]).mean())
               for name in METHODS},
            **{f"path_share_{name}": float(edges[f"path_{name}"].mean())
               for name in ("attattr", "attention")},
            "tree_share": float(edges["tree_path"].mean())}


def head_table(attr: np.ndarray, attention: np.ndarray, queries: np.ndarray, b: np.ndarray,
               a: np.ndarray) -> pd.DataFrame:
    """One row per head: its mean attention at the query on B (induction score) and at B on A
    (previous-token score), its mean maximal attribution and AttAttr's rank by it, and
    whether it is an induction or a previous-token head."""
    n_ex, n_layers, n_heads = attention.shape[:3]
    picks = np.arange(n_ex)
    heads = pd.DataFrame([
        {"layer": layer, "head": head,
         "induction_score": float(attention[picks, layer, head, queries, b].mean()),
         "previous_token_score": float(attention[picks, layer, head, b, a].mean()),
         "attattr_importance": float(attr[:, layer, head].reshape(n_ex, -1).max(axis=1).mean())}
        for layer in range(n_layers) for head in range(n_heads)])
    heads["attattr_rank"] = heads["attattr_importance"].rank(ascending=False, method="first")
    heads = heads.astype({"attattr_rank": "int64"})
    heads["induction_head"] = heads["induction_score"] >= MECHANISM_SCORE
    heads["previous_token_head"] = heads["previous_token_score"] >= MECHANISM_SCORE
    return heads


def masking_drops(model: PreTrainedModel, inputs: dict[str, torch.Tensor],
                  top_heads: list[tuple[int, int]], *,
                  shape: tuple[int, int]) -> tuple[float, float, list[float]]:
    """The next-token accuracy of the whole model, its drop when `top_heads` are masked, and
    its drop for every other pair of heads masked (`shape`: layers, heads)."""
    full = _accuracy(model, inputs)
    top_drop = full - _accuracy(model, inputs, _mask(shape, top_heads))
    others = [h for h in itertools.product(*map(range, shape)) if h not in top_heads]
    other_drops = [full - _accuracy(model, inputs, _mask(shape, list(pair)))
                   for pair in itertools.combinations(others, MECHANISM_HEADS)]
    return full, top_drop, other_drops


def induction_claims(shares: dict[str, float], *, found: int, top_drop: float,
                     other_drop: float) -> list[dict[str, Any]]:
    """The stage's claims on the `edge_shares`, the number of mechanism heads `found` among
    AttAttr's top two, and the accuracy drop of masking them against the largest of any other
    pair (`other_drop`)."""
    attattr, path = shares["share_attattr"], shares["path_share_attattr"]
    tree = shares["tree_share"]
    return [
        claim(STAGE, "AttAttr's strongest edge at the second A points to B's first position",
              "share of examples", attattr, attattr >= EDGE_SHARE),
        claim(STAGE, "AttAttr's strongest edge finds B at least as often as raw attention's",
              "share AttAttr - share attention", attattr - shares["share_attention"],
              attattr >= shares["share_attention"]),
        claim(STAGE, "AttAttr's strongest edge finds B at least as often as rollout's",
              "share AttAttr - share rollout", attattr - shares["share_rollout"],
              attattr >= shares["share_rollout"]),
        claim(STAGE, "AttAttr's strongest layer-0 edge is B's first position reading A (the "
              "previous-token step)", "share of examples", path, path >= EDGE_SHARE),
        claim(STAGE, "AttAttr's strongest layer-0 edge is that step more often than raw "
              "attention's", "share AttAttr - share attention",
              path - shares["path_share_attention"], path > shares["path_share_attention"]),
        claim(STAGE, "AttAttr's attribution tree joins the second A to B through B reading A "
              "in layer 0", "share of examples", tree, tree >= EDGE_SHARE),
        claim(STAGE, "AttAttr's top two heads are induction or previous-token heads",
              "mechanism heads among AttAttr's top two", found, found == MECHANISM_HEADS),
        claim(STAGE, "Masking AttAttr's top two heads costs more next-token accuracy than "
              "masking any two other heads", "accuracy drop, top two - largest other pair",
              top_drop - other_drop, top_drop > other_drop),
    ]
