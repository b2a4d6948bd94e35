"""Rule attack_eval (Hao et al. 2021 §6): each class's top mined triggers inserted into every dev
example of a task, against random words at the same positions (`attnlab.analyses.attack`),
and the attack's claims."""

from __future__ import annotations

import logging

import pandas as pd

from attnlab.analyses import attack
from attnlab.analyses.claims import claims_frame, log_claims, on_models
from attnlab.analyses.triggers import planted_margin, planted_triggers
from attnlab.data.dumps import read_dump, word_level
from attnlab.model_job import ModelJob
from attnlab.report.trigger_figures import plot_attack

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the tables `table` (accuracy per gold class before and after each trigger and
    random tokens) and `claims`, and the `figure`. The planted triggers' recovery is judged on
    the mined `patterns`."""
    cfg = job.settings.triggers
    dev = job.split("dev")
    mined = pd.read_parquet(job.inputs["triggers"])
    source, _ = read_dump(job.inputs["source"])
    pool = attack.source_words(word_level(source), job.tokenizer.all_special_tokens)
    log.info("task %s: attacking %d dev examples with the top %d triggers of each class; "
             "random words from %d distinct source words", job.task, len(dev), cfg.top,
             len(pool))
    examples = attack.attack_examples(job.model, dev, job.spec, job.tokenizer, mined, pool, cfg,
                                      job.settings.model, job.settings.seed)
    table = attack.class_table(examples)
    summary = attack.other_class_summary(table, list(job.spec.label_names))
    planted = planted_triggers(job.settings.task, job.tokenizer)
    recovery = (planted_margin(pd.read_parquet(job.inputs["patterns"]), planted, cfg.top)
                if planted else None)
    claims = on_models(claims_frame(attack.attack_claims(attack.example_drops(examples),
                                                         recovery, cfg.top)),
                       job.finetune_metrics)
    job.write_tables({"table": table, "claims": claims})
    names = {job.spec.label_names[c]: " ".join(sorted(words)) for c, words in planted.items()}
    plot_attack(summary, job.task, names or None, job.outputs["figure"])
    for row in summary.itertuples():
        log.info("%s: other classes %.3f -> %.3f (random tokens %.3f)", row.trigger, row.before,
                 row.trigger_after, row.random_after)
    log_claims(claims, job.task)
