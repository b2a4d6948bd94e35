"""Accuracy against cost of every quadrature rule, on a trained model and its dev examples.

Each rule attributes the examples into dump rows through `attnlab.engine.dump_rows`, what the
workflow's `attribute` jobs run (so its seconds are those of a job's encoding, engine and dump
rows; the job's model loading and file writing aside). Each is compared with a converged
reference that the study computes itself: composite Gauss–Legendre (8 nodes on each of
`panels` equal panels), whose own error is estimated by halving the panel count. Reported per
rule:

* completeness error |Σ Attr(A^l) − (F(A) − F(0·A^l))| over every (example, layer) pair
  (median, p99, max) and the share within the configured tolerance;
* per-head maximum attribution error, on the layers whose removal moves F by more than
  `min_delta`: per (example, layer), max_h |m_h − m_h*| / max_h |m_h*|, with m_h = max_ij
  Attr_h(A^l) of the rule and m_h* of the reference (median, p99, max);
* gradient evaluations per (example, layer) (mean, max) and seconds per example (the mean of
  two runs, the second in reverse rule order), also as a ratio to the fixed Gauss–Legendre
  rule with 6 nodes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.analyses.heads import head_maxima
from attnlab.data import tasks
from attnlab.data.dumps import completeness_errors, dump_frame
from attnlab.engine.attribution import attribute, composite_gauss_legendre
from attnlab.engine.dump_rows import dump_rows
from attnlab.engine.examples import encoded_frame
from attnlab.plumbing.device import CPU_BATCH_SIZE, attribution_batch_size

# (rule, steps of a fixed rule or tolerance of the adaptive one)
RULES = [("riemann_right", 20), ("riemann_right", 64), ("gauss_legendre", 6),
         ("gauss_legendre", 16), ("gauss_legendre", 64), ("adaptive", 1e-2), ("adaptive", 1e-3),
         ("adaptive", 1e-4)]
BASELINE = "gauss_legendre_6"


def rule_name(rule: str, setting: float) -> str:
    return f"{rule}_{setting:g}"


def _quantiles(values: np.ndarray) -> dict[str, float | None]:
    """Median, p99 and max; None where there is nothing to compare (a model whose layers all
    leave F where it is)."""
    if not values.size:
        return dict.fromkeys(("median", "p99", "max"))
    return {"median": float(np.median(values)), "p99": float(np.quantile(values, 0.99)),
            "max": float(values.max())}


def reference_head_maxima(model: PreTrainedModel, inputs: dict[str, torch.Tensor], *,
                          target: str, panels: int, batch_size: int | str,
                          device: torch.device) -> tuple[np.ndarray, float]:
    """Per-head maxima (B, L, H) of the converged reference on tokenized examples (on
    `device`), and their largest change when the panel count is halved, relative to the
    largest maximum (the reference's own error)."""
    # the reference's hundreds of nodes per example: 8 times attribution.batch_size rows per
    # pass (on a CPU 8 x its auto default); auto on a GPU fills its memory already (counting
    # an example's state per row, more than the study's few examples hold)
    batch_size = attribution_batch_size(
        batch_size if batch_size == "auto" else 8 * batch_size, model.config,
        inputs["input_ids"].shape[1], device, cpu_rows=8 * CPU_BATCH_SIZE)
    mask = inputs["attention_mask"].cpu()
    maxima = [
        head_maxima(attribute(model, inputs, target, composite_gauss_legendre(n, 8),
                               batch_size=batch_size).attr.double().cpu(), mask)
        for n in (panels, panels // 2)
    ]
    return maxima[0], float(np.abs(maxima[0] - maxima[1]).max() / np.abs(maxima[0]).max())


def study(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dev: pd.DataFrame,
          spec: tasks.TaskSpec, settings: Mapping[str, Any], model_settings: Mapping[str, Any],
          *, device: torch.device, panels: int = 64, min_delta: float = 0.05) -> dict[str, Any]:
    """Every rule of RULES against the reference on the examples `dev` (rows of a prepared
    split). `settings`: the config's `attribution` section, whose rule each of RULES replaces;
    `model_settings`: the model's max_length and truncate."""
    inputs = {key: value.to(device)
              for key, value in encoded_frame(dev, spec, tokenizer, model_settings).items()}
    reference, reference_error = reference_head_maxima(
        model, inputs, target=settings["target"], panels=panels,
        batch_size=settings["batch_size"], device=device)
    report: dict[str, Any] = {
        "examples": len(dev), "min_delta": min_delta, "tolerance": settings["tolerance"],
        "reference": {"rule": f"composite Gauss-Legendre, {panels} panels x 8 nodes",
                      "head_max_change_when_halved": reference_error},
        "rules": {},
    }
    seconds = dict.fromkeys(RULES, 0.0)
    dumps: dict[tuple[str, float], pd.DataFrame] = {}
    # every rule twice, the second time in reverse order, so that load from other jobs on a
    # shared machine falls on the rules alike (the dumps are the same both times)
    for rule, setting in RULES + RULES[::-1]:
        cfg = {**settings, "quadrature": rule,
               **({"tolerance": setting} if rule == "adaptive" else {"steps": int(setting)})}
        start = time.perf_counter()
        dumps[rule, setting] = dump_frame(
            dump_rows(model, tokenizer, dev, spec, cfg, model_settings, device=device).rows)
        seconds[rule, setting] += (time.perf_counter() - start) / 2
    for rule, setting in RULES:
        dump = dumps[rule, setting]
        delta, error, _ = completeness_errors(dump)
        n_layers = delta.shape[1]
        maxima = np.stack(dump["attr_max"].to_numpy()).reshape(len(dump), n_layers, -1)
        head_error = (np.abs(maxima - reference).max(-1)
                      / np.abs(reference).max(-1).clip(1e-12))[np.abs(delta) > min_delta]
        nodes = np.stack(dump["grad_nodes"].to_numpy())
        report["rules"][rule_name(rule, setting)] = {
            "completeness_abs_error": _quantiles(error),
            "within_tolerance": float((error <= settings["tolerance"]).mean()),
            "head_max_error": _quantiles(head_error),
            "layers_compared": int(head_error.size),
            "grad_nodes_mean": float(nodes.mean()),
            "grad_nodes_max": int(nodes.max()),
            "seconds_per_example": seconds[rule, setting] / len(dump),
        }
    baseline = report["rules"][BASELINE]["seconds_per_example"]
    for entry in report["rules"].values():
        entry[f"seconds_vs_{BASELINE}"] = entry["seconds_per_example"] / baseline
    return report
