"""Stage interaction_methods: which explanation finds the interaction? Every attributed dev
example's token-to-token interactions per layer, by each method, judged against the planted
ground truth and by faithfulness (attnlab.analyses.interaction_eval; docs/interaction_methods.md).

Methods (scores [l, i, j]: layer l, query i, key j; each defined in its module):
    attention             head-mean attention                     attnlab.methods.attention_graph
    attattr               AttAttr, from the dumps                  attnlab.methods.edge_gradients
    attention_x_gradient  attention × gradient                     attnlab.methods.edge_gradients
    rollout, flow         Abnar & Zuidema 2020                     attnlab.methods.attention_graph
    attention_norm, alti  Kobayashi et al. 2020; Ferrando et al.   attnlab.methods.attention_norms
    value_zeroing         Mohebbi et al. 2023                      attnlab.methods.value_zeroing
    occlusion             F drop when one edge is zeroed           attnlab.methods.edge_occlusion

All methods score the first `examples` attributed examples — on a synthetic task, the first of
those a planted pair decides (the others have no ground truth) — but flow, whose L·n²
maximum-flow problems per example cost seconds each, scores only the first `flow_examples`.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformers import PreTrainedModel

from attnlab.analyses.claims import log_claims
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
from attnlab.data import tasks
from attnlab.data.dumps import read_task_dump
from attnlab.engine import examples, models
from attnlab.engine.capture import Captured, capture
from attnlab.methods import attention_graph, attention_norms
from attnlab.methods.edge_gradients import attattr_from_dump, attention_x_gradient
from attnlab.methods.edge_occlusion import occlusion
from attnlab.methods.value_zeroing import normalise_rows, value_zeroing
from attnlab.plumbing.errors import AttnlabError
from attnlab.plumbing.outputs import write_table, write_task_tables
from attnlab.report.html_pages import write_tables_page
from attnlab.report.interaction_figures import plot_deletion, plot_ground_truth

log = logging.getLogger(__name__)

METHODS = ("attention", "attattr", "attention_x_gradient", "rollout", "flow", "attention_norm",
           "alti", "value_zeroing", "occlusion")


def _norm_scores(model: PreTrainedModel, example: Captured) -> dict[str, torch.Tensor]:
    norms, contributions = [], []
    for layer in range(example.probs.shape[0]):
        out_proj, layer_norm = models.attention_sublayer(model, layer)
        transformed = attention_norms.transformed_values(example.values[layer], out_proj)
        norms.append(attention_norms.attention_norm(example.probs[layer], transformed))
        contributions.append(attention_norms.alti_layer(
            example.probs[layer], transformed, example.states[layer][0], out_proj, layer_norm))
    return {"attention_norm": torch.stack(norms),
            "alti": attention_norms.aggregate(torch.stack(contributions))}


def score_example(
    model: PreTrainedModel,
    example: Captured,
    attattr: np.ndarray,
    *,
    with_flow: bool,
    batch_size: int,
    seconds: dict[str, float],
) -> dict[str, np.ndarray]:
    """Every method's (L, n, n) scores of one example (AttAttr given, from its dump row);
    the time each method took is added to `seconds`."""
    def timed(names, compute):
        start = time.perf_counter()
        result = compute()
        for name in names:  # methods computed together share their time
            seconds[name] += (time.perf_counter() - start) / len(names)
        return result

    attention = attention_graph.head_mean(example.probs.double().cpu().numpy())
    computed = {"attention": attention, "attattr": attattr}
    with torch.no_grad():
        computed["rollout"] = timed(["rollout"], lambda: attention_graph.rollout(attention))
        if with_flow:
            computed["flow"] = timed(["flow"], lambda: attention_graph.flow(attention))
        computed.update(timed(["attention_norm", "alti"], lambda: _norm_scores(model, example)))
        computed["value_zeroing"] = timed(
            ["value_zeroing"], lambda: normalise_rows(value_zeroing(model, example.states)))
        computed["occlusion"] = timed(["occlusion"],
                                      lambda: occlusion(model, example, batch_size))
    computed["attention_x_gradient"] = timed(["attention_x_gradient"],
                                             lambda: attention_x_gradient(model, example))
    return {method: (computed[method] if isinstance(computed[method], np.ndarray)
                     else computed[method].double().cpu().numpy())
            for method in METHODS if method in computed}


def analyse_task(
    model_dir: str | os.PathLike,
    *,
    dev_path: str | os.PathLike,
    dump_paths: list[str | os.PathLike],
    spec: tasks.TaskSpec,
    cfg: dict[str, Any],
    model_cfg: dict[str, Any],
    seed: int,
    device: torch.device,
    out: dict[str, str | os.PathLike],
    provenance: dict[str, Any],
) -> pd.DataFrame:
    """Score, evaluate and compare every method on a task's first cfg["examples"] attributed
    dev examples. Writes out["scores"], out["ground_truth"], out["deletion"], out["claims"]
    (Parquet, with provenance), out["leaderboard"] (HTML) and the two figures; returns the
    claims."""
    model, tokenizer = models.load_classifier(model_dir, device)
    dump, meta = read_task_dump(dump_paths)
    # the dumps hold the dev split's first examples, in order
    dev = tasks.load_split(dev_path, spec).iloc[: len(dump)].reset_index(drop=True)
    if "idx" in dev and not (dev["idx"].to_numpy() == dump["idx"].to_numpy()).all():
        raise AttnlabError("the attribution dumps are not of this dev split (rerun attribute)")
    if dump["planted_i"].notna().any():
        dump = dump[dump["planted_i"].notna()]
    dump = dump.iloc[: cfg["examples"]] if cfg["examples"] else dump
    dev = dev.loc[dump.index].reset_index(drop=True)
    dump = dump.reset_index(drop=True)
    encoded = examples.encoded_frame(dev, spec, tokenizer, model_cfg)
    log.info("task %s: %d examples (flow: %d), %d layers x %d heads", spec.name, len(dump),
             min(cfg["flow_examples"], len(dump)), meta["n_layers"], meta["n_heads"])
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
        attattr = attattr_from_dump(dump.loc[row.Index], meta["n_layers"], meta["n_heads"])
        scores = score_example(model, example, attattr,
                               with_flow=row.Index < cfg["flow_examples"],
                               batch_size=cfg["batch_size"], seconds=seconds)
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
        curves.append(deletion_drops(model, example, orders, cfg["deletion_steps"],
                                     cfg["batch_size"]).assign(idx=row.idx))
        seconds["deletion curves (all methods)"] += time.perf_counter() - start

    truth = pd.DataFrame(truth_rows, columns=["idx", "method", "layer", "hit", "rank"])
    curves = pd.concat(curves, ignore_index=True)
    truth_summary = ground_truth_summary(truth)
    deletion = deletion_summary(curves)
    board = leaderboard(truth_summary, deletion)
    counts = pd.Series({m: len(dump) for m in METHODS} | {"flow": min(cfg["flow_examples"],
                                                                       len(dump))})
    board["seconds_per_example"] = board["method"].map(
        lambda m: seconds[m] / counts[m] if counts.get(m) else float("nan"))
    table = pd.DataFrame(claims(truth_summary, deletion))
    write_table(pd.DataFrame(score_rows), out["scores"], provenance)
    write_task_tables(spec.name, {"ground_truth": truth_summary, "deletion": deletion,
                                  "claims": table}, out, provenance)
    timings = pd.DataFrame([{"step": step, "seconds": s} for step, s in seconds.items()])
    write_tables_page(out["leaderboard"], f"Interaction methods: {spec.name}", [
        ("Leaderboard", "planted_*: the strongest edge of some layer against the planted pair "
         "(share of examples it joins, median rank and MRR of the planted edge); deletion_*: "
         "AOPC when the method's top-k edges of every layer are zeroed, and its margin over "
         "random edges on the same examples (docs/interaction_methods.md).", board),
        ("Ground truth per layer", "scope: the layer, or any layer.", truth_summary),
        ("Faithfulness per scope", "scope: the layer deleted in, or all layers at once.",
         deletion),
        ("Claims", "", table),
        ("Time per method (s, all examples)", "", timings),
    ])
    plot_ground_truth(truth_summary, spec.name, out["ground_truth_figure"])
    plot_deletion(curves, deletion, spec.name, out["deletion_figure"])
    for step, s in seconds.items():
        log.info("%s: %.1f s", step, s)
    log_claims(table, spec.name)
    return table
