"""Accuracy against cost of every quadrature rule on the models a configuration has trained.

For every task of the configuration, the first `--examples` dev examples are attributed by every
rule of `attnlab.analyses.quadrature_study.RULES` (Riemann 20/64, Gauss-Legendre 6/16/64, adaptive
at 1e-2/1e-3/1e-4) into the workflow's own dump rows, and compared with a converged
reference the study computes itself (composite Gauss-Legendre, checked by halving). Prints one JSON
object (per task and rule: completeness error, per-head maximum attribution error, gradient
evaluations, seconds per example and their ratio to Gauss-Legendre 6) and writes the
error-against-cost figure. The workflow's `quadrature_study` rule runs the same study on fewer
examples for the report. Needs the configuration's finetune outputs (`make run`).
--scan-steps sets the adaptive rule's scan (default: the configuration's).
Usage: python benchmarks/quadrature.py [--config config.yaml] [--examples 64] [--figure F]
       [--scan-steps 8]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from measure import write_report

from attnlab.analyses.quadrature_study import study
from attnlab.data.tasks import TaskSpec, load_split
from attnlab.engine.models import load_classifier
from attnlab.plumbing.config import read_config_file, validate_config
from attnlab.plumbing.errors import ConfigError, stop
from attnlab.plumbing.preflight import check_config
from attnlab.report.quadrature_figures import plot_study

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--figure", default=str(ROOT / "benchmarks/results/quadrature.png"))
    parser.add_argument("--scan-steps", type=int, help="the adaptive rule's scan")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the workflow's attribute jobs run (threads: 1)
    config = read_config_file(args.config)
    if args.scan_steps is not None:
        config.setdefault("attribution", {})["scan_steps"] = args.scan_steps
    try:  # as the workflow checks it (defaults filled in), before any model runs
        validate_config(config)
        check_config(config, pretrained=None)
    except ConfigError as err:
        stop(err, "config error: ")
    results = ROOT / "results" / config["name"]
    missing = [task for task in config["tasks"]
               if not (results / "finetune" / task / "model").is_dir()]
    if missing:
        raise SystemExit(f"no trained model of {', '.join(missing)} under {results}/finetune: "
                         f"run `make run CONFIG={args.config}` first")
    cpu = torch.device("cpu")
    report = {}
    for task, task_cfg in config["tasks"].items():
        spec = TaskSpec.from_config(task, task_cfg)
        model, tokenizer = load_classifier(results / "finetune" / task / "model", cpu)
        dev = load_split(results / "data" / task / "dev.parquet", spec)
        report[task] = study(model, tokenizer, dev.iloc[: args.examples].reset_index(drop=True),
                             spec, config["attribution"], config["model"])
    Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
    plot_study(report, args.figure)
    write_report({"config": args.config, "figure": args.figure, "tasks": report}, None)


if __name__ == "__main__":
    main()
