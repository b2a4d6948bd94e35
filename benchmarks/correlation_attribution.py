"""Rule attribute on a task of role correlation (config/real.yaml's critic_or_user and
rotten_tomatoes_shuffled), the code that attributed its whole dev split against the code that
attributes only the examples head_importance reads, on the packaged MiniLM and real critics'
sentences.

Side by side in one run, on the same model and dev split:
  * old: attnlab.stages.attribute as it was at commit BEFORE, read from git (the engine it
    calls is today's): the first attribution.max_examples dev examples, in one batch plan;
  * new: the stage now: the first heads.importance_examples of them only (their own batches).
Besides, outside the timing: the stage now on a task of role all (rotten_tomatoes), which
attributes those examples apart from the rest: its head scores of them must equal the
correlation task's to the bit (`differing_head_scores_whole`), which is what head_importance
reads either way. The old code's head scores differ from the new in float rounding only (the
engine sums other batches in another order): `max_abs_difference`.
What is timed: one job of rule attribute (shard 0 of 1) with config/real.yaml's attribution
settings (adaptive quadrature, batch_size 64), attribution.max_examples --examples and
heads.importance_examples --importance-examples (config/real.yaml: 300 and 200; the defaults
keep its ratio at a small size). The model is the packaged sentence-transformers/
all-MiniLM-L6-v2 (make test installs it) with a seeded classification head of std 0.5
(`length_order.minilm`); the dev split is Rotten Tomatoes' train split in a seeded shuffle
(`length_order.sentences`' draw). Timed in --rounds rounds, each variant once per round in
alternating order, one thread. Prints one JSON object and writes it with --out.
Usage: python benchmarks/correlation_attribution.py [--examples 12]
       [--importance-examples 8] [--rounds 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from length_order import RT_TRAIN, minilm
from measure import LayerWork, module_at, old_against_new, write_report

from attnlab.data import packages
from attnlab.data.dumps import attributed_head_scores
from attnlab.engine import models
from attnlab.model_job import ModelJob
from attnlab.plumbing.config import load_config
from attnlab.stages import attribute

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "9323204fe41890763e7b751f2304e8ec99100dc8"  # the last commit before the change
CORRELATION, WHOLE = "rotten_tomatoes_shuffled", "rotten_tomatoes"  # roles correlation, all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=12)
    parser.add_argument("--importance-examples", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(
        ROOT / "benchmarks/results/correlation-attribution-cpu.json"))
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the stage's per-job log lines
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = load_config(ROOT / "config" / "real.yaml")
    config["device"] = "cpu"
    config["attribution"]["max_examples"] = args.examples
    config["heads"]["importance_examples"] = args.importance_examples
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model, tokenizer = minilm(folder / "packaged")
        model.save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
        frame, _ = packages.packaged_split(*RT_TRAIN)
        dev = frame.sample(n=args.examples, random_state=0).reset_index(drop=True)
        dev.insert(0, "idx", range(len(dev)))
        dev.to_parquet(folder / "dev.parquet")

        def job(task: str, name: str) -> ModelJob:
            made = ModelJob.from_config(
                "attribute", config, task=task,
                inputs={"model": str(folder / "model"), "dev": str(folder / "dev.parquet")},
                outputs={"part": str(folder / name / "part.parquet"),
                         "summary": str(folder / name / "summary.json")})
            return replace(made, wildcards={**made.wildcards, "shard": "0"})

        jobs = {"old": job(CORRELATION, "old"), "new": job(CORRELATION, "new")}
        stages = {"old": module_at(BEFORE, "attnlab/stages/attribute.py"), "new": attribute}
        work = LayerWork(jobs["old"].model)
        work.watch(jobs["new"].model)
        _, timing = old_against_new(
            {variant: lambda v=variant: stages[v].run(jobs[v]) for variant in stages},
            args.rounds, work)
        whole = job(WHOLE, "whole")
        attribute.run(whole)
        shape = models.head_shape(whole.model)
        scores = {name: attributed_head_scores(
            [folder / name / "part.parquet"], jobs["new"].split("dev"), head_shape=shape,
            target=config["attribution"]["target"]) for name in ("old", "new", "whole")}
    read = args.importance_examples  # what head_importance reads of each
    report: dict[str, Any] = {
        "examples": args.examples, "importance_examples": read, "rounds": args.rounds,
        "before": BEFORE, "attributed_old": len(scores["old"]["attribution"]),
        "attributed_new": len(scores["new"]["attribution"]), **timing,
        "max_abs_difference": max(float(np.abs(old[:read] - scores["new"][name]).max())
                                  for name, old in scores["old"].items()),
        "differing_head_scores_whole": sum(
            int((whole[:read] != scores["new"][name]).sum())
            for name, whole in scores["whole"].items()),
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
