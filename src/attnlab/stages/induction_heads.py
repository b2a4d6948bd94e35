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
from attnlab.plumbing.errors import ConfigError


def run(job: ModelJob) -> None:
    """Writes the tables heads, ablation and claims and the JSON summary (the examples of
    each part, the loss and accuracy of the whole model, the CPU seconds per prompt of the raw
    attention scores and of attribution patching)."""
    cfg = job.settings.induction
    n_rank, n_eval = cfg.head_examples, cfg.ablation_examples
    dev = job.split("dev")
    if len(dev) < n_rank + n_eval:
        raise ConfigError(f"induction.head_examples + induction.ablation_examples = "
                          f"{n_rank + n_eval} is more than the task's {len(dev)} dev examples")
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
    log_claims(claims, job.task)
