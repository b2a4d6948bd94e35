"""Rule induction_heads: a decoder's heads ranked by prefix matching, previous token, AttAttr
and attribution patching, and each ranking's top heads mean-ablated against random and lowest
ones, with the loss of the second copy beside the first's (attnlab.analyses.induction_heads);
the same on an untrained model of the same shape, the control."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.analyses import induction_heads
from attnlab.analyses.claims import log_claims, on_models
from attnlab.analyses.pruning import attribution_maxima
from attnlab.data.dumps import attributed_head_scores
from attnlab.engine import examples, models, next_token
from attnlab.engine.attribution import engine_options
from attnlab.engine.batch_size import examples_per_call, rows_per_pass
from attnlab.model_job import ModelJob
from attnlab.plumbing.preflight import check_after
from attnlab.report.html_pages import write_tables_page

log = logging.getLogger(__name__)
# the control's findings are told from the model's by this start of their claim
UNTRAINED = "Untrained model of the same shape: "


def run(job: ModelJob) -> None:
    """Writes the tables heads, ablation and claims (the model's findings, then the untrained
    control's, their claims starting UNTRAINED), the untrained model's untrained_heads and
    untrained_ablation, the JSON summary (the examples of each part, the loss and accuracy of
    the whole model, the first copy's loss, the CPU seconds per prompt of the raw attention
    scores and of attribution patching; the untrained model's under `untrained`) and the
    tables as the report's page."""
    cfg = job.settings.induction
    n_rank, n_eval = cfg.head_examples, cfg.ablation_examples
    dev = job.split("dev")
    check_after(job.settings, job.task, "induction.ablation_examples", n_split=len(dev),
                n_before=min(n_rank, len(dev)))
    attattr = attributed_head_scores(job.paths("parts"), dev,
                                     head_shape=models.head_shape(job.model),
                                     target=job.settings.attribution.target)["attribution"]
    inputs = job.encoded("dev", n_rank + n_eval)
    induction = torch.tensor(next_token.token_positions(dev.iloc[: n_rank + n_eval], job.spec,
                                                        job.tokenizer, "gt_induction"))
    ranking = {k: v[:n_rank] for k, v in inputs.items()}

    def analysed(model: PreTrainedModel, scores: np.ndarray) -> induction_heads.HeadsResult:
        return induction_heads.head_analysis(
            model, ranking, {k: v[n_rank:] for k, v in inputs.items()},
            induction=induction[:n_rank], evaluation_induction=induction[n_rank:],
            attattr=scores[:n_rank], ks=list(cfg.ablation_k), draws=cfg.random_draws,
            seed=job.settings.seed, batch_size=job.settings.heads.batch_size)

    result = analysed(job.model, attattr)
    # the control: fresh weights drawn with the run's seed (models.untrained_copy)
    untrained_model = models.untrained_copy(job.model, job.settings.seed)
    log.info("task %s: the untrained control, its %d attributed prompts attributed", job.task,
             len(attattr))
    untrained = analysed(untrained_model,
                         _attributed(job, untrained_model, inputs, len(attattr)))
    claims = on_models(pd.concat(
        [result.claims, untrained.claims.assign(claim=UNTRAINED + untrained.claims["claim"])],
        ignore_index=True), job.finetune_metrics)
    job.write_tables({"heads": result.heads, "ablation": result.ablation, "claims": claims,
                      "untrained_heads": untrained.heads,
                      "untrained_ablation": untrained.ablation})
    job.write_json("summary", {**result.summary, "untrained": untrained.summary})
    ablation_note = ("The mean next-token loss and accuracy of the evaluation examples, and "
                     "the first copy's loss of the same target token, with each ranking's top "
                     "k heads, AttAttr's lowest k or k random heads (the mean over the draws) "
                     "mean-ablated; k = 0: the whole model.")
    heads_note = ("Every head's mean prefix-matching and previous-token attention, AttAttr's "
                  "mean maximal attribution, attribution patching's estimate of the loss's "
                  "rise when it is mean-ablated, and its rank by each (1: top).")
    write_tables_page(job.outputs["page"], f"Induction heads: {job.task}", [
        ("Claims", "Each finding's estimate with its 95 % bootstrap interval (the untrained "
         "control's last).", claims),
        ("Ablation", ablation_note, result.ablation),
        ("Heads", heads_note, result.heads),
        ("Ablation, untrained model", ablation_note, untrained.ablation),
        ("Heads, untrained model", heads_note, untrained.heads)])
    log_claims(claims, job.task)


def _attributed(job: ModelJob, model: PreTrainedModel, inputs: dict[str, Any],
                n: int) -> np.ndarray:
    """The per-head maximal attributions (n, L, H) of the first n prompts of `inputs` on
    `model`, to their targets, with the run's attribution settings: what rule attribute's
    dumps hold for the run's model (to attribution.target)."""
    engine = engine_options(job.settings.attribution)
    attributed = {k: v[:n] for k, v in inputs.items()}
    engine["batch_size"] = rows_per_pass(model.config, engine,
                                         attributed["input_ids"].shape[1], job.device)
    target = (attributed["labels"] if job.settings.attribution.target == "gold"
              else examples.predict(model, attributed).argmax(-1))
    return attribution_maxima(model, attributed, target, engine, examples_per_call(engine))
