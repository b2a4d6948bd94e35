"""Rule attention_permutation (Jain & Wallace 2019; Drozdyuk et al.): every head's attention
shuffled over its keys, one layer at a time and all together, on a task's first dev examples;
on the same examples, attention's ranking of the tokens against gradient and leave-one-out
importance; and the statements judged on both."""

from __future__ import annotations

import logging

import pandas as pd

from attnlab.analyses import attention_permutation, attention_ranking
from attnlab.analyses.claims import log_claims, on_models
from attnlab.model_job import ModelJob
from attnlab.report.explanation_figures import plot_attention_permutation

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the tables table, ranking and claims, and the figure."""
    settings = job.settings.explanation
    cfg = settings.attention_permutation
    inputs = job.encoded("dev", cfg.examples)
    log.info("task %s: attention permutation of %d dev examples, %d permutations per setting",
             job.task, len(inputs["input_ids"]), cfg.permutations)
    table = attention_permutation.permutation_table(job.model, job.tokenizer, inputs,
                                                    cfg.permutations, job.settings.seed,
                                                    settings.batch_size)
    ranking = attention_ranking.ranking_table(job.model, job.tokenizer, inputs,
                                              settings.batch_size, gradient=settings.gradient)
    claims = on_models(pd.DataFrame(attention_permutation.claims(table)
                                    + attention_ranking.claims(ranking,
                                                               gradient=settings.gradient)),
                       job.finetune_metrics)
    job.write_tables({"table": table, "ranking": ranking, "claims": claims})
    plot_attention_permutation(table, attention_permutation.summary(table),
                               job.outputs["figure"])
    log_claims(claims, job.task)
