"""Rule induction: what attribution finds in a decoder on the planted induction task, against
the task's ground truth (attnlab.analyses.induction)."""

from __future__ import annotations

import torch

from attnlab.analyses import induction
from attnlab.analyses.claims import log_claims, on_models
from attnlab.engine import attribution, next_token
from attnlab.engine.batch_size import rows_per_pass
from attnlab.model_job import ModelJob


def run(job: ModelJob) -> None:
    """Writes the tables edges, heads and claims and the JSON summary (next-token accuracy,
    the masking drops, each method's share of examples whose top edge finds B)."""
    dev = job.split("dev").iloc[: job.settings.induction.examples]
    truth = {column: torch.tensor(next_token.token_positions(dev, job.spec, job.tokenizer,
                                                             column))
             for column in ("gt_induction", "gt_previous")}
    inputs = {k: v.to(job.device) for k, v in job.encoded("dev", len(dev)).items()}
    engine = attribution.engine_options(job.settings.attribution)
    engine["batch_size"] = rows_per_pass(job.model.config, engine, inputs["input_ids"].shape[1],
                                         job.device)
    result = induction.induction_analysis(
        job.model, inputs, induction=truth["gt_induction"], previous=truth["gt_previous"],
        engine=engine)
    claims = on_models(result.claims, job.finetune_metrics)
    job.write_tables({"edges": result.edges, "heads": result.heads, "claims": claims})
    job.write_json("summary", {**result.summary, "examples": len(dev)})
    log_claims(claims, job.task)
