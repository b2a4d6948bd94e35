"""Rule mine_triggers (Hao et al. 2021 §6): the first source examples of a task attributed into a
dump, the pattern of each, and the patterns ranked per class into triggers
(`attnlab.analyses.triggers` has the procedure)."""

from __future__ import annotations

import logging

from attnlab.analyses import triggers
from attnlab.data.dumps import read_dump, word_level, write_dump
from attnlab.engine.dump_rows import dump_rows
from attnlab.model_job import ModelJob
from attnlab.plumbing.outputs import write_table

log = logging.getLogger(__name__)

LOGGED_RANKS = 3  # the log shows each class's top triggers, as many as the paper evaluates


def run(job: ModelJob) -> None:
    """Writes the dump of the source examples (`source`), their patterns (`patterns`) and the
    triggers ranked per class (`triggers`)."""
    cfg = job.settings.triggers
    source = job.split("source").iloc[: cfg.source_examples].reset_index(drop=True)
    # the dumps' engine and edges, attributed to the triggers' target; two pairs per head at
    # least, as the patterns take them
    attribution = {**job.settings.attribution, "target": cfg.target, "keep_full": False,
                   "top_pairs": max(2, job.settings.attribution.top_pairs)}
    attributed = dump_rows(job.model, job.tokenizer, source, job.spec, attribution,
                           job.settings.model)
    write_dump(attributed.rows, job.outputs["source"],
               {"n_layers": attributed.n_layers, "n_heads": attributed.n_heads,
                "top_pairs": attribution["top_pairs"], "task": job.task, **job.provenance})
    dump, meta = read_dump(job.outputs["source"])
    # patterns of words: the pieces of a word the tokenizer split merged into it
    patterns = triggers.patterns_table(word_level(dump), meta["n_layers"], meta["n_heads"], cfg,
                                       job.tokenizer.all_special_tokens)
    ranked = triggers.rank_triggers(patterns, list(job.spec.label_names),
                                    triggers.planted_triggers(job.settings.task, job.tokenizer))
    log.info("task %s: %d of %d source patterns kept, %d distinct triggers", job.task,
             int(patterns["kept"].sum()), len(patterns), len(ranked))
    for row in ranked[ranked["rank"] <= LOGGED_RANKS].itertuples():
        log.info("class %s #%d: %s (frequency %d, mean score %.4f, planted %s)", row.class_name,
                 row.rank, " ".join(row.tokens), row.frequency, row.mean_score, row.planted)
    write_table(patterns, job.outputs["patterns"], job.provenance)
    write_table(ranked, job.outputs["triggers"], job.provenance)
