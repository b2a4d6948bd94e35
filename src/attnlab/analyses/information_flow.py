"""Information flow (Hao et al. 2021 §5): the attribution tree (`attnlab.analyses.trees`) of every
attributed dev example of a task, their sizes, figures of a sample of them and, on tasks with
planted pairs, whether the trees find the pair that decides the label."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import numpy as np
import pandas as pd

from attnlab.analyses.claims import claim, claims_frame, log_claims
from attnlab.analyses.trees import incomplete_layers, planted_pair, sample_examples, tree_from_dump
from attnlab.data.dumps import read_task_dump
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.outputs import atomic_path, write_json, write_task_tables
from attnlab.report.flow_figures import plot_tree, plot_tree_sizes

log = logging.getLogger(__name__)

# Ground truth (a): the tree joins the planted pair in at least this share of the correctly
# classified examples (the acceptance bar of issue #4).
PLANTED_TREE_SHARE = 0.8


def tree_tables(dump: pd.DataFrame, n_layers: int, tau: float,
                normalise: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every example's tree: (edges, trees).

    edges: example, kind ("flow" or "root"), layer, from, to, score (a^l_ij / max; null for
    root edges, which stand for the last layer, L−1), from_token, to_token.
    trees: one row per example, also when its tree has no flow edge: example, label, pred,
    correct, n_tokens, top_node, top_token, nodes (without the root), edges (flow edges),
    layers (distinct layers with a flow edge), joins_planted (null without ground truth),
    incomplete_layers (layers whose stored edges may miss some above tau: the tree may lack
    edges there).
    """
    edge_rows, tree_rows = [], []
    for _, row in dump.iterrows():
        tree = tree_from_dump(row, n_layers, tau, normalise)
        tokens = list(row["tokens"])
        example = int(row["idx"])
        flow = [(layer, i, j, score, "flow") for layer, i, j, score in tree.edges]
        root = [(n_layers - 1, i, j, None, "root") for i, j in tree.root_edges()]
        edge_rows += [{"example": example, "kind": kind, "layer": layer, "from": i, "to": j,
                       "score": score, "from_token": tokens[i], "to_token": tokens[j]}
                      for layer, i, j, score, kind in flow + root]
        planted = planted_pair(row)
        incomplete = incomplete_layers(row, n_layers, tau, normalise)
        tree_rows.append({
            "example": example, "label": int(row["label"]), "pred": int(row["pred"]),
            "correct": bool(row["label"] == row["pred"]), "n_tokens": int(row["n_tokens"]),
            "top_node": tree.top, "top_token": None if tree.top is None else tokens[tree.top],
            "nodes": len(tree.nodes), "edges": len(tree.edges),
            "layers": len({layer for layer, *_ in tree.edges}),
            "joins_planted": None if planted is None else tree.joins(*planted),
            "incomplete_layers": len(incomplete),
        })
    edges = pd.DataFrame(edge_rows, columns=["example", "kind", "layer", "from", "to", "score",
                                             "from_token", "to_token"])
    trees = pd.DataFrame(tree_rows).astype({"top_node": "Int64", "joins_planted": "boolean"})
    return edges.astype({"score": "float64"}), trees


def size_summary(trees: pd.DataFrame) -> dict[str, Any]:
    """Tree-size statistics across the examples."""
    summary: dict[str, Any] = {"examples": len(trees),
                               "empty_trees": int((trees["edges"] == 0).sum()),
                               "incomplete_trees": int((trees["incomplete_layers"] > 0).sum())}
    for column in ("nodes", "edges", "layers"):
        values = trees[column].to_numpy()
        summary[column] = {"mean": float(values.mean()), "median": float(np.median(values)),
                           "p90": float(np.quantile(values, 0.9)), "max": int(values.max())}
    return summary


def planted_share(trees: pd.DataFrame) -> tuple[float, int]:
    """Share of the correctly classified examples with ground truth whose tree joins the
    planted pair, and how many such examples there are (share NaN when none)."""
    known = trees[trees["correct"] & trees["joins_planted"].notna()]
    return (float(known["joins_planted"].mean()) if len(known) else float("nan")), len(known)


def tree_claims(trees: pd.DataFrame) -> list[dict[str, Any]]:
    """Ground truth (a), on tasks with planted pairs: the tree finds the deciding pair."""
    share, n = planted_share(trees)
    if n == 0:
        return []
    return [claim("trees", "the attribution tree joins the planted token pair",
                  f"share of the {n} correctly classified dev examples whose tree has a flow "
                  f"edge joining the planted pair (holds if >= {PLANTED_TREE_SHARE})",
                  share, share >= PLANTED_TREE_SHARE)]


def trees_stage(
    dump_paths: list[str | os.PathLike],
    *,
    spec: TaskSpec,
    trees_cfg: dict[str, Any],
    seed: int,
    out: dict[str, str | os.PathLike],
    provenance: dict[str, Any],
) -> pd.DataFrame:
    """Trees of every attributed dev example of a task; writes out["edges"], out["trees"],
    out["claims"] (Parquet), out["summary"] (JSON), out["sizes"] (figure) and the tree
    figures of the sampled examples into the folder out["figures"]. Returns the claims."""
    dump, meta = read_task_dump(dump_paths)
    tau, normalise = trees_cfg["tau"], trees_cfg["normalise"]
    chosen = sample_examples(dump["idx"].tolist(), trees_cfg["examples"],
                             trees_cfg["example_idx"], seed)
    log.info("task %s: trees of %d examples, tau %s, normalised by the %s maximum", spec.name,
             len(dump), tau, normalise)
    edges, trees = tree_tables(dump, meta["n_layers"], tau, normalise)
    claims = claims_frame(tree_claims(trees))
    summary = size_summary(trees)
    if summary["incomplete_trees"]:
        log.warning("%d trees may lack edges: the dumps' attribution.max_edges_per_layer cut edges "
                    "above tau in some of their layers (trees.parquet: incomplete_layers); "
                    "attribute with a higher cap for exact trees", summary["incomplete_trees"])
    share, n_planted = planted_share(trees)
    summary["planted_pair"] = {"examples": n_planted, "share": share if n_planted else None}
    write_task_tables(spec.name, {"edges": edges, "trees": trees, "claims": claims}, out,
                      provenance)
    write_json(out["summary"], {**summary, **provenance})
    plot_tree_sizes(trees, out["sizes"])
    with atomic_path(out["figures"]) as folder:
        folder.mkdir()
        for _, row in dump[dump["idx"].isin(chosen)].iterrows():
            tree = tree_from_dump(row, meta["n_layers"], tau, normalise)
            plot_tree(row, tree, meta["n_layers"], list(spec.label_names), tau, planted_pair(row),
                      folder / f"tree_{row['idx']}.png")
    log.info("tree sizes: %s", json.dumps(summary))
    log_claims(claims, spec.name)
    return claims
