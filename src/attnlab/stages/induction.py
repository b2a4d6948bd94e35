"""Rule induction: what attribution finds in a decoder on the planted induction task, against
the task's ground truth (attnlab.analyses.induction), on the attributions rule attribute
dumped (their full matrices, attribution.keep_full)."""

from __future__ import annotations

import numpy as np
import torch

from attnlab.analyses import induction
from attnlab.analyses.claims import log_claims, on_models
from attnlab.data.dumps import full_attributions, read_task_dump
from attnlab.engine import models, next_token
from attnlab.model_job import ModelJob
from attnlab.plumbing.errors import AttnlabError, ConfigError


def run(job: ModelJob) -> None:
    """Writes the tables edges, heads and claims and the JSON summary (next-token accuracy,
    the masking drops, each method's share of examples whose top edge finds B)."""
    n = job.settings.induction.examples
    dump, _ = read_task_dump(job.paths("parts"))
    if len(dump) < n:
        raise ConfigError(f"induction.examples: {n} is more than the {len(dump)} attributed dev "
                          "examples (attribution.max_examples)")
    dump, dev = dump.iloc[:n], job.split("dev").iloc[:n]
    if "idx" in dev and not np.array_equal(dump["idx"], dev["idx"]):
        raise AttnlabError("the attribution dump's rows are not the first dev examples in "
                          "order: rebuild it with --forcerun attribute")
    truth = {column: torch.tensor(next_token.token_positions(dev, job.spec, job.tokenizer,
                                                             column))
             for column in ("gt_induction", "gt_previous")}
    inputs = {k: v.to(job.device) for k, v in job.encoded("dev", n).items()}
    attr = full_attributions(dump, *models.head_shape(job.model),
                             width=inputs["input_ids"].shape[1])
    result = induction.induction_analysis(
        job.model, inputs, attr=attr, induction=truth["gt_induction"],
        previous=truth["gt_previous"])
    claims = on_models(result.claims, job.finetune_metrics)
    job.write_tables({"edges": result.edges, "heads": result.heads, "claims": claims})
    job.write_json("summary", {**result.summary, "examples": n})
    log_claims(claims, job.task)
