"""Rule token_identifiability (Brunner et al. 2020 §4): maps from each layer's hidden tokens
back to the input embeddings, fitted on a task's first training sentences and scored on its
first dev sentences, and the paper's statements judged on them."""

from __future__ import annotations

import logging

import pandas as pd

from attnlab.analyses import token_identifiability
from attnlab.analyses.claims import log_claims, on_models
from attnlab.model_job import ModelJob
from attnlab.report.identifiability_figures import plot_token_identifiability

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the tables sentences (identified tokens per held-out sentence), rates and claims,
    and the figure."""
    settings = job.settings.identifiability
    cfg = settings.token_identifiability
    train = job.encoded("train", cfg.train_examples)
    dev = job.encoded("dev", cfg.eval_examples)
    train_states = token_identifiability.token_states(job.model, train, settings.batch_size)
    dev_states = token_identifiability.token_states(job.model, dev, settings.batch_size)
    log.info("task %s: token identifiability, maps fitted on %d tokens of %d training "
             "sentences, scored on %d tokens of %d dev sentences", job.task,
             len(train_states[1]), len(train["input_ids"]), len(dev_states[1]),
             len(dev["input_ids"]))
    sentences = token_identifiability.identified_by_sentence(train_states, dev_states, cfg,
                                                             job.settings.seed)
    rates = token_identifiability.rates(sentences)
    claims = on_models(pd.DataFrame(token_identifiability.claims(sentences)),
                       job.finetune_metrics)
    job.write_tables({"sentences": sentences, "rates": rates, "claims": claims})
    plot_token_identifiability(rates, job.outputs["figure"])
    log_claims(claims, job.task)
