"""Seconds per example of every token-interaction method, and attention flow's two solvers.

Side by side in one run:
  * flow: attnlab's SciPy maximum flow (compiled Dinic on integer capacities scaled by 2^30,
    attnlab.methods.flow) against networkx's shortest augmenting path on the same graphs (the
    solver attnlab used before), on random head-mean attention of each shape; the speedup is
    networkx seconds / SciPy seconds, and the largest difference of the unnormalised flows is
    reported beside the bound of attnlab.methods.flow;
  * every method of the registry on one random-init classifier per shape (the default model's,
    a MiniLM-shaped one), timed as the stage times it: its own seconds plus the forward pass
    every method needs (attnlab.analyses.interaction_methods). AttAttr runs the engine with the
    default attribution settings (adaptive, tolerance 1e-3).
Examples are timed in rounds, each variant once per round, so that load from other jobs falls
on all alike. Prints one JSON object (machines here are noisy: compare ratios).
Usage: python benchmarks/interaction_methods.py [--examples 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import networkx as nx
import numpy as np
import torch
from networkx.algorithms.flow import build_residual_network, shortest_augmenting_path
from transformers import BertConfig, BertForSequenceClassification

from attnlab.analyses.interaction_methods import CAPTURE, Options, score_example
from attnlab.engine import models
from attnlab.engine.capture import capture
from attnlab.methods.attention_graph import residual_attention
from attnlab.methods.flow import max_flows
from attnlab.methods.method import Variants
from attnlab.methods.registry import METHODS

FLOW_SHAPES = [(4, 15), (6, 25), (6, 32)]  # (layers, tokens)
MODEL_SHAPES = {"default (4 layers, 8 heads, d 64)": (4, 8, 64, 128, 15),
                "MiniLM (6 layers, 12 heads, d 384)": (6, 12, 384, 1536, 25)}
ENGINE = {"quadrature": "adaptive", "steps": 6, "batch_size": 64, "tolerance": 1e-3,
          "max_steps": 120, "scan_steps": 8}


def networkx_flows(attention: np.ndarray) -> np.ndarray:
    """The unnormalised flows by networkx's shortest augmenting path on a residual network
    built once per layer (attnlab's solver before SciPy's)."""
    mixed = residual_attention(attention)
    n_layers, n, _ = mixed.shape
    out = np.zeros_like(mixed)
    for layer in range(n_layers):
        graph = nx.DiGraph()
        for m in range(layer + 1):
            for i in range(n):
                for j in range(n):
                    graph.add_edge(m * n + j, (m + 1) * n + i, capacity=float(mixed[m, i, j]))
        residual = build_residual_network(graph, "capacity")
        for i in range(n):
            for j in range(n):
                out[layer, i, j] = shortest_augmenting_path(
                    graph, j, (layer + 1) * n + i, residual=residual,
                    value_only=True).graph["flow_value"]
    return out


def flow_solvers(examples: int) -> list[dict]:
    rows = []
    for layers, n in FLOW_SHAPES:
        rng = np.random.default_rng(n)
        seconds = defaultdict(float)
        error = 0.0
        for _ in range(examples):
            attention = rng.dirichlet(np.ones(n) * 0.3, size=(layers, n))
            start = time.perf_counter()
            ours = max_flows(attention)
            seconds["scipy"] += time.perf_counter() - start
            start = time.perf_counter()
            theirs = networkx_flows(attention)
            seconds["networkx"] += time.perf_counter() - start
            error = max(error, float(np.abs(ours - theirs).max()))
        rows.append({"layers": layers, "tokens": n,
                     "scipy_s_per_example": seconds["scipy"] / examples,
                     "networkx_s_per_example": seconds["networkx"] / examples,
                     "speedup": seconds["networkx"] / seconds["scipy"],
                     "max_abs_difference": error,
                     "bound": layers * n * n * 2.0**-31})
    return rows


def method_seconds(examples: int) -> dict[str, dict]:
    out = {}
    for name, (layers, heads, hidden, intermediate, n) in MODEL_SHAPES.items():
        torch.manual_seed(0)
        model = models.prepare_model(BertForSequenceClassification(BertConfig(
            vocab_size=1000, hidden_size=hidden, num_hidden_layers=layers,
            num_attention_heads=heads, intermediate_size=intermediate, num_labels=2)))
        options = Options(methods=METHODS, variants=Variants(), engine=ENGINE,
                          deletion_steps=10, erasure_bins=[0.5], batch_size=512, seed=0)
        seconds = defaultdict(float)
        for e in range(examples):
            ids = torch.randint(5, 1000, (1, n), generator=torch.Generator().manual_seed(e))
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            start = time.perf_counter()
            example = capture(model, inputs, target=1)
            seconds[CAPTURE] += time.perf_counter() - start
            score_example(model, example, options, seconds)
        out[name] = {"tokens": n, **{m.name: (seconds[m.name] + seconds[CAPTURE]) / examples
                                     for m in METHODS}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=3)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = {"threads": 1, "examples": args.examples, "flow": flow_solvers(args.examples),
              "seconds_per_example": method_seconds(args.examples)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
