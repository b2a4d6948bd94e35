"""Rule effective_attention (Brunner et al. 2020 §3): effective attention of every head on a
task's first dev examples, and the paper's statements judged on it."""

from __future__ import annotations

import logging

import pandas as pd

from attnlab.analyses import effective_attention
from attnlab.analyses.claims import log_claims
from attnlab.model_job import ModelJob
from attnlab.report.identifiability_figures import plot_effective_attention

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the tables heads, tokens and claims (each with the heads' d_v beside the job's
    provenance) and the figure."""
    settings = job.settings.identifiability
    inputs = job.encoded("dev", settings.effective_attention.examples)
    d_v = job.model.config.hidden_size // job.model.config.num_attention_heads
    log.info("task %s: effective attention of %d dev examples (d_v = %d)", job.task,
             len(inputs["input_ids"]), d_v)
    per_head, mass = effective_attention.analyse_examples(job.model, job.tokenizer, inputs,
                                                          settings.batch_size)
    claims = pd.DataFrame(effective_attention.claims(per_head, mass, d_v))
    job.write_tables({"heads": per_head, "tokens": mass, "claims": claims}, meta={"d_v": d_v})
    plot_effective_attention(per_head, mass, d_v, job.outputs["figure"])
    log_claims(claims, job.task)
