"""Rule interaction_methods (docs/interaction_methods.md): which explanation finds the
interaction? Every method of attnlab.methods.registry scores every token pair of every layer of
a task's first attributed dev examples; each is judged against the planted pairs and by
deletion curves, and the claims are judged on them."""

from __future__ import annotations

import logging

import pandas as pd

from attnlab.analyses import interaction_methods
from attnlab.analyses.claims import log_claims
from attnlab.data.dumps import read_task_dump
from attnlab.engine import examples
from attnlab.model_job import ModelJob
from attnlab.plumbing.outputs import write_table
from attnlab.report.html_pages import write_tables_page
from attnlab.report.interaction_figures import plot_deletion, plot_ground_truth

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the table scores (no task column: it sits in the task's partition of the
    interaction_scores dataset), the tables ground_truth, deletion and claims, the page
    leaderboard (with the time each method took) and the figures ground_truth_figure and
    deletion_figure."""
    cfg = job.settings.interaction_methods
    dump, meta = read_task_dump(job.inputs["parts"])
    dump, dev = interaction_methods.scored_examples(dump, job.split("dev"), cfg.examples)
    encoded = examples.encoded_frame(dev, job.spec, job.tokenizer, job.settings.model)
    log.info("task %s: %d examples (flow: %d), %d layers x %d heads", job.task, len(dump),
             min(cfg.flow_examples, len(dump)), meta["n_layers"], meta["n_heads"])
    result = interaction_methods.compare_methods(
        job.model, encoded, dump, meta, limits={"flow": cfg.flow_examples},
        deletion_steps=cfg.deletion_steps, batch_size=cfg.batch_size, seed=job.settings.seed,
        device=job.device)
    write_table(result.scores, job.outputs["scores"], job.provenance)
    job.write_tables({"ground_truth": result.ground_truth, "deletion": result.deletion,
                      "claims": result.claims})
    timings = pd.DataFrame([{"step": step, "seconds": s} for step, s in result.seconds.items()])
    write_tables_page(job.outputs["leaderboard"], f"Interaction methods: {job.task}", [
        ("Leaderboard", "planted_*: the strongest edge of some layer against the planted pair "
         "(share of examples it joins, median rank and MRR of the planted edge); deletion_*: "
         "AOPC when the method's top-k edges of every layer are zeroed, and its margin over "
         "random edges on the same examples (docs/interaction_methods.md).",
         result.leaderboard),
        ("Ground truth per layer", "scope: the layer, or any layer.", result.ground_truth),
        ("Faithfulness per scope", "scope: the layer deleted in, or all layers at once.",
         result.deletion),
        ("Claims", "", result.claims),
        ("Time per method (s, all examples)", "", timings),
    ])
    plot_ground_truth(result.ground_truth, job.task, job.outputs["ground_truth_figure"])
    plot_deletion(result.curves, result.deletion, job.task, job.outputs["deletion_figure"])
    for step, s in result.seconds.items():
        log.info("%s: %.1f s", step, s)
    log_claims(result.claims, job.task)
