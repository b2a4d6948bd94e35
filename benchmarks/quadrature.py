"""Completeness error of each quadrature rule on the models a configuration has trained.

For every task of the configuration, the first `--examples` dev examples are attributed with
each rule by the workflow's own engine and writer (into a temporary folder). Prints one JSON
object: per task and rule, the median and 90th percentile of the relative completeness error
|Σ Attr − (F(A) − F(0·A^l))| / |F(A) − F(0·A^l)| over the layers whose removal moves F by more
than `--min-delta` (elsewhere the relative error divides by almost nothing), and the
planted-pair recovery. Needs the configuration's finetune outputs (`make run`).
Usage: python benchmarks/quadrature.py [--config config.yaml] [--examples 100]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
import yaml
from snakemake.utils import validate

from attnlab.dumps import attribute_shard, completeness_errors, read_dump
from attnlab.groundtruth import planted_pair_recovery
from attnlab.tasks import TaskSpec

ROOT = Path(__file__).resolve().parents[1]
RULES = [("riemann_right", 20), ("gauss_legendre", 6), ("gauss_legendre", 8),
         ("gauss_legendre", 16), ("riemann_right", 64)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "config.yaml"))
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--min-delta", type=float, default=0.01)
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    validate(config, str(ROOT / "workflow/schemas/config.schema.yaml"))  # fills the defaults
    results = ROOT / "results" / config["name"]
    missing = [task for task in config["tasks"]
               if not (results / "finetune" / task / "model").is_dir()]
    if missing:
        raise SystemExit(f"no trained model of {', '.join(missing)} under {results}/finetune: "
                         f"run `make run CONFIG={args.config}` first")
    report: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for task, task_cfg in config["tasks"].items():
            spec = TaskSpec.from_config(task, task_cfg)
            report[task] = {}
            for rule, steps in RULES:
                attribution = {**config["attribution"], "quadrature": rule, "steps": steps,
                               "max_examples": args.examples}
                dump_path = Path(tmp) / f"{task}_{rule}_{steps}.parquet"
                attribute_shard(results / "finetune" / task / "model",
                                results / "data" / task / "dev.parquet", spec, attribution,
                                config["model"], 0, 1, torch.device("cpu"), dump_path, {})
                dump, _ = read_dump(dump_path)
                delta, error = completeness_errors(dump)
                moved = np.abs(delta) > args.min_delta
                relative = error[moved] / np.abs(delta[moved])
                report[task][f"{rule}_{steps}"] = {
                    "layers_compared": int(moved.sum()),
                    "relative_error_median": float(np.median(relative)),
                    "relative_error_p90": float(np.quantile(relative, 0.9)),
                    "planted_pair_recovery": planted_pair_recovery(dump),
                }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
