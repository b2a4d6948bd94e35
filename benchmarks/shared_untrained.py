"""The interaction methods' untrained model over seeds: scored by every seed's job (the code
before) against scored once by the first seed's job and read back by the later seeds (today's
stage, attnlab.stages.interaction_methods), on the packaged MiniLM and real critics' sentences.

Side by side in one run, for --seeds seeds of a replicated run on the same --examples
sentences (each seed's trained model is stood for by the same seeded-head MiniLM: the
untrained side is what changes):
  * every_seed: each seed compares the methods on the trained model and on the untrained copy
    (drawn with the config's seed, so the same in every seed);
  * first_seed: seed 0 does both and writes the untrained comparison's tables to Parquet; the
    later seeds compare on the trained model and read those tables.
Each seed's summary (intervals, pairs, claims, and the rest; the leaderboard without its
seconds) is compared between the variants: `differing_tables` counts the (seed, table) pairs
that are not equal to the bit.
The methods are config/real.yaml's unless --methods names others. Timed in --rounds rounds,
each variant once per round in alternating order, one thread. Prints one JSON object and
writes it with --out.
Usage: python benchmarks/shared_untrained.py [--examples 2] [--seeds 3] [--rounds 1]
       [--methods NAME ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from length_order import one_thread_minilm, sentences
from measure import LayerWork, old_against_new, write_report

from attnlab.analyses import interaction_methods
from attnlab.analyses.interaction_methods import Comparison, Options, compare_methods
from attnlab.engine import models
from attnlab.engine.attribution import engine_options
from attnlab.methods import registry
from attnlab.methods.method import Variants
from attnlab.plumbing.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def examples(inputs: dict[str, Any]) -> pd.DataFrame:
    """The dump rows compare_methods reads: each sentence's index, tokens and gold target (no
    planted pair in real text)."""
    return pd.DataFrame({"idx": np.arange(len(inputs["labels"])),
                         "n_tokens": inputs["attention_mask"].sum(dim=1).numpy(),
                         "target": inputs["labels"].numpy(), "planted_i": np.nan,
                         "planted_j": np.nan})


def replicated(model: Any, inputs: dict[str, Any], options: Options, *, special_ids: list[int],
               seeds: int, first_seed: bool, folder: Path,
               work: LayerWork) -> list[interaction_methods.Summary]:
    """Each seed's summary, the untrained model scored by every seed or by the first only
    (`work` counts the untrained copies' layers too)."""
    dump = examples(inputs)
    encoded = {k: v for k, v in inputs.items() if k != "labels"}

    def compare(scored: Any) -> Comparison:
        return compare_methods(scored, encoded, dump, options, special_ids=special_ids,
                               device=model.device, desc="benchmark")

    summaries = []
    for seed in range(seeds):
        comparisons = {"trained": compare(model)}
        if first_seed and seed > 0:
            comparisons["untrained"] = Comparison.from_tables(
                {name: pd.read_parquet(folder / f"{name}.parquet")
                 for name in interaction_methods.TABLES})
        else:
            untrained = models.untrained_copy(model, 0)
            work.watch(untrained)
            comparisons["untrained"] = compare(untrained)
            for name, table in comparisons["untrained"].tables().items():
                table.to_parquet(folder / f"{name}.parquet")
        summaries.append(interaction_methods.summarise(comparisons, reps=100, seed=0))
    return summaries


def differences(old: list[interaction_methods.Summary],
                new: list[interaction_methods.Summary]) -> int:
    """How many (seed, table) pairs of the two variants' summaries differ at all."""
    def table(summary: interaction_methods.Summary, name: str) -> pd.DataFrame:
        # the leaderboard's seconds per example are the time each took, not an output
        return getattr(summary, name).drop(columns="seconds_per_example", errors="ignore")

    return sum(not table(a, name).equals(table(b, name))
               for a, b in zip(old, new, strict=True)
               for name in interaction_methods.Summary.__dataclass_fields__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--methods", nargs="+", default=None,
                        help="interaction methods (default: config/real.yaml's)")
    parser.add_argument("--out", default=str(
        ROOT / "benchmarks/results/shared-untrained-cpu.json"))
    args = parser.parse_args()
    config = load_config(ROOT / "config" / "real.yaml")
    cfg = config["interaction_methods"]
    chosen, _ = registry.chosen(args.methods or cfg["methods"], decoder=False)
    model, tokenizer = one_thread_minilm()
    inputs = sentences(tokenizer, args.examples)
    width = int(inputs["attention_mask"].sum(dim=1).max())
    inputs = {k: v[:, :width] if v.dim() == 2 else v for k, v in inputs.items()}
    options = Options(methods=chosen, variants=Variants(), engine=engine_options(
        config["attribution"]), deletion_steps=cfg["deletion_steps"],
        erasure_bins=cfg["erasure_bins"], batch_size=cfg["batch_size"], seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        folders = {variant: Path(tmp, variant) for variant in ("old", "new")}
        for folder in folders.values():
            folder.mkdir()
        work = LayerWork(model)
        summaries, timing = old_against_new(
            {variant: lambda v=variant: replicated(
                model, inputs, options, special_ids=tokenizer.all_special_ids, seeds=args.seeds,
                first_seed=v == "new", folder=folders[v], work=work)
             for variant in folders}, args.rounds, work)
    report = {
        "examples": args.examples, "seeds": args.seeds, "rounds": args.rounds,
        "methods": [method.name for method in chosen],
        "tokens": inputs["attention_mask"].sum(dim=1).tolist(),
        "variants": {"old": "every_seed", "new": "first_seed"},
        **timing,
        "differing_tables": differences(summaries["old"], summaries["new"]),
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
