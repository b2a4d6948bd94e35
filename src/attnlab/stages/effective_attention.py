"""Rule effective_attention (Brunner et al. 2020 §3): effective attention of every head on a
task's first dev examples, and the paper's statements judged on it."""

from __future__ import annotations

import logging

import pandas as pd

from attnlab.analyses import effective_attention
from attnlab.analyses.claims import log_claims, on_models
from attnlab.engine import models
from attnlab.model_job import ModelJob
from attnlab.report.identifiability_figures import plot_effective_attention

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the tables heads, tokens and claims (each with the heads' d_v beside the job's
    provenance) and the figure."""
    settings = job.settings.identifiability
    inputs = job.encoded("dev", settings.effective_attention.examples)
    log.info("task %s: effective attention of %d dev examples", job.task,
             len(inputs["input_ids"]))
    per_head, mass = effective_attention.analyse_examples(job.model, job.tokenizer, inputs,
                                                          settings.batch_size)
    # the size of the captured value vectors, not a formula from the config: what the SVD saw
    d_v = int(per_head["d_v"].iloc[0])
    lengths = per_head.drop_duplicates("example")["length"]
    log.info("task %s: d_v = %d; %d examples of <= d_v tokens, %d longer", job.task, d_v,
             (lengths <= d_v).sum(), (lengths > d_v).sum())
    decoder = models.family_of(job.model).causal
    if decoder:
        log.info("task %s: a decoder: each attention row's null space is that of the keys its "
                 "causal mask allows", job.task)
    claims = on_models(pd.DataFrame(effective_attention.claims(per_head, mass, d_v,
                                                               decoder=decoder)),
                       job.finetune_metrics)
    job.write_tables({"heads": per_head, "tokens": mass, "claims": claims}, meta={"d_v": d_v})
    plot_effective_attention(per_head, mass, d_v, job.outputs["figure"])
    log_claims(claims, job.task)
