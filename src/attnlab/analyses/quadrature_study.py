"""Accuracy against cost of every quadrature rule, on a trained model and its dev examples.

Each rule attributes the examples into dump rows through `attnlab.engine.dump_rows`, what the
workflow's `attribute` jobs run (so its seconds are those of a job's encoding, engine and dump
rows; the job's model loading and file writing aside). Each is compared with a converged
reference that the study computes itself: composite Gauss–Legendre (8 nodes on each of
`panels` equal panels, doubled until converged), whose own error is estimated by halving the
panel count. Reported per rule:

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

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.data import tasks
from attnlab.data.dumps import completeness_errors, dump_frame, within_tolerance
from attnlab.engine.attribution import attribute, composite_gauss_legendre, head_maxima
from attnlab.engine.batch_size import rows_per_pass
from attnlab.engine.dump_rows import dump_rows
from attnlab.engine.examples import encoded_frame

log = logging.getLogger(__name__)

# (rule, steps of a fixed rule or tolerance of the adaptive one)
RULES = [("riemann_right", 20), ("riemann_right", 64), ("gauss_legendre", 6),
         ("gauss_legendre", 16), ("gauss_legendre", 64), ("adaptive", 1e-2), ("adaptive", 1e-3),
         ("adaptive", 1e-4)]
BASELINE = "gauss_legendre_6"
# The reference's rows per pass, in rows of attribution.batch_size (or of its CPU default):
# its 512 nodes per example share one example's state among 512 rows (an ordinary rule's
# among 1 to 20), so its rows are lighter and 8 times as many fit. `auto` on a GPU estimates
# the reference's own rows and is not scaled (`rows_per_pass`).
REFERENCE_ROWS = 8
# The reference is converged when halving its panels moves no per-head maximum by more than
# this share of the largest; it doubles its panels at most MAX_DOUBLINGS times to get there.
CONVERGED = 1e-5
MAX_DOUBLINGS = 3


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
                          device: torch.device) -> tuple[np.ndarray, float, int]:
    """Per-head maxima (B, L, H) of the converged reference on tokenized examples (on
    `device`), their largest change when the panel count is halved, relative to the largest
    maximum (the reference's own error), and the panels it took. It starts at `panels` and
    doubles them while that change is above CONVERGED, up to MAX_DOUBLINGS times: how many
    a model needs depends on how steep its F(αA) is, which differs from one trained model
    (and one CPU's float path through training) to the next."""
    mask = inputs["attention_mask"].cpu()

    def maxima(n: int) -> np.ndarray:
        rule = composite_gauss_legendre(n, 8)
        rows = rows_per_pass(model.config, {"quadrature": rule, "batch_size": batch_size},
                             inputs["input_ids"].shape[1], device, scale=REFERENCE_ROWS)
        return head_maxima(attribute(model, inputs, target, rule, batch_size=rows)
                            .attr.double().cpu(), mask)

    coarse, fine = maxima(panels // 2), maxima(panels)
    for doubling in range(MAX_DOUBLINGS + 1):
        change = float(np.abs(fine - coarse).max() / np.abs(fine).max())
        if change <= CONVERGED or doubling == MAX_DOUBLINGS:
            break
        panels *= 2
        coarse, fine = fine, maxima(panels)
    if change > CONVERGED:
        log.warning("the quadrature study's reference changes by %.2g when its %d panels are "
                    "halved (converged: <= %g); its errors are uncertain by as much",
                    change, panels, CONVERGED)
    return fine, change, panels


def study(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dev: pd.DataFrame,
          spec: tasks.TaskSpec, attribution: Mapping[str, Any],
          model_settings: Mapping[str, Any], *, panels: int = 64,
          min_delta: float = 0.05) -> dict[str, Any]:
    """Every rule of RULES against the reference on the examples `dev` (rows of a prepared
    split), on the model's device. `attribution`: the config's `attribution` section, whose
    rule each of RULES replaces (and whose tolerance every rule is measured against);
    `model_settings`: the config's `model` section (max_length and truncate)."""
    device = next(model.parameters()).device
    inputs = {key: value.to(device)
              for key, value in encoded_frame(dev, spec, tokenizer, model_settings).items()}
    reference, reference_error, panels = reference_head_maxima(
        model, inputs, target=attribution["target"], panels=panels,
        batch_size=attribution["batch_size"], device=device)
    report: dict[str, Any] = {
        "examples": len(dev), "min_delta": min_delta, "tolerance": attribution["tolerance"],
        "reference": {"rule": f"composite Gauss-Legendre, {panels} panels x 8 nodes",
                      "head_max_change_when_halved": reference_error},
        "rules": {},
    }
    seconds = dict.fromkeys(RULES, 0.0)
    dumps: dict[tuple[str, float], pd.DataFrame] = {}
    # every rule twice, the second time in reverse order, so that load from other jobs on a
    # shared machine falls on the rules alike (the dumps are the same both times)
    for rule, setting in RULES + RULES[::-1]:
        with_rule = {**attribution, "quadrature": rule,
                     **({"tolerance": setting} if rule == "adaptive" else {"steps": int(setting)})}
        start = time.perf_counter()
        dumps[rule, setting] = dump_frame(
            dump_rows(model, tokenizer, dev, spec, with_rule, model_settings).rows)
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
            "within_tolerance": float(within_tolerance(error, attribution["tolerance"]).mean()),
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
