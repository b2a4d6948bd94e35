"""Rule token_mixing (Brunner et al. 2020 §5): how much each input token contributes to each
hidden token, on a task's first dev examples, and the paper's statements judged on it."""

from __future__ import annotations

import logging

import pandas as pd

from attnlab.analyses import token_mixing
from attnlab.analyses.claims import log_claims, on_models
from attnlab.model_job import ModelJob
from attnlab.report.identifiability_figures import plot_token_mixing

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the tables tokens, offsets and claims, and the figure."""
    cfg = job.settings.identifiability.token_mixing
    inputs = job.encoded("dev", cfg.examples)
    log.info("task %s: token mixing of %d dev examples (exact up to %d tokens, else %d probes)",
             job.task, len(inputs["input_ids"]), cfg.exact_max_tokens, cfg.probes)
    # vjp_batch, named when the products ran in reverse mode: tangents per batched pass
    tokens, offsets = token_mixing.analyse_examples(job.model, inputs, cfg.exact_max_tokens,
                                                    cfg.probes, cfg.vjp_batch, job.settings.seed)
    claims = on_models(pd.DataFrame(token_mixing.claims(tokens)), job.finetune_metrics)
    job.write_tables({"tokens": tokens, "offsets": offsets, "claims": claims})
    plot_token_mixing(tokens, offsets, job.outputs["figure"])
    log_claims(claims, job.task)
