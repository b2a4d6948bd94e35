"""Rule induction_heads: a decoder's heads ranked by prefix matching, previous token, AttAttr
and attribution patching, and each ranking's top heads mean-ablated against random and lowest
ones (attnlab.analyses.induction_heads)."""

from __future__ import annotations

import torch

from attnlab.analyses import induction_heads
from attnlab.analyses.claims import log_claims, on_models
from attnlab.data.dumps import attributed_head_scores
from attnlab.engine import models, next_token
from attnlab.model_job import ModelJob
from attnlab.plumbing.preflight import check_after
from attnlab.report.html_pages import write_tables_page


def run(job: ModelJob) -> None:
    """Writes the tables heads, ablation and claims, the JSON summary (the examples of each
    part, the loss and accuracy of the whole model, the CPU seconds per prompt of the raw
    attention scores and of attribution patching) and the three tables as the report's page."""
    cfg = job.settings.induction
    n_rank, n_eval = cfg.head_examples, cfg.ablation_examples
    dev = job.split("dev")
    check_after(job.settings, job.task, "induction.ablation_examples", n_split=len(dev),
                n_before=min(n_rank, len(dev)))
    attattr = attributed_head_scores(job.paths("parts"), dev,
                                     head_shape=models.head_shape(job.model),
                                     target=job.settings.attribution.target)["attribution"]
    inputs = job.encoded("dev", n_rank + n_eval)
    induction = torch.tensor(next_token.token_positions(dev.iloc[:n_rank], job.spec,
                                                        job.tokenizer, "gt_induction"))
    result = induction_heads.head_analysis(
        job.model, {k: v[:n_rank] for k, v in inputs.items()},
        {k: v[n_rank:] for k, v in inputs.items()}, induction=induction,
        attattr=attattr[:n_rank], ks=list(cfg.ablation_k), draws=cfg.random_draws,
        seed=job.settings.seed, batch_size=job.settings.heads.batch_size)
    claims = on_models(result.claims, job.finetune_metrics)
    job.write_tables({"heads": result.heads, "ablation": result.ablation, "claims": claims})
    job.write_json("summary", result.summary)
    write_tables_page(job.outputs["page"], f"Induction heads: {job.task}", [
        ("Claims", "Each finding's estimate with its 95 % bootstrap interval.", claims),
        ("Ablation", "The mean next-token loss and accuracy of the evaluation examples with "
         "each ranking's top k heads, AttAttr's lowest k or k random heads (the mean over the "
         "draws) mean-ablated; k = 0: the whole model.", result.ablation),
        ("Heads", "Every head's mean prefix-matching and previous-token attention, AttAttr's "
         "mean maximal attribution, attribution patching's estimate of the loss's rise when "
         "it is mean-ablated, and its rank by each (1: top).", result.heads)])
    log_claims(claims, job.task)
