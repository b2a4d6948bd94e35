"""Attention against token importance (Jain & Wallace 2019 §4.1, docs/methods.md): does
attention rank a classifier's input tokens as gradient-based and leave-one-out importance do?

Per example, over its content tokens (special tokens left out: [CLS] and [SEP] carry no word
of the input, and attention to them is large whatever the input; Clark et al. 2019):

* attention: the last layer's attention from the token the classification head reads ([CLS];
  BART's last </s>), averaged over heads. Jain & Wallace's models have one attention layer over
  the tokens that feeds the classifier; in a transformer the last layer's row of that token is
  the nearest to it (our choice, as no single attention is the model's).
* gradient: |∇_{w_t} ŷ · w_t|, w_t the word embedding of token t and ŷ the predicted class's
  probability: the gradient with respect to the one-hot input at the token's word, one score
  per token as Jain & Wallace's code takes it (BART: through its encoder's word embeddings).
  `gradient`: DETACHED (theirs: their code detaches the attention weights for it; here every
  attention of the model is held at its value, so the gradient is the output's change with the
  input with every attention distribution fixed) or THROUGH_ATTENTION (through the attention
  too).
* leave-one-out: TVD(ŷ(x), ŷ(x without t)), the output distribution's change when token t is
  removed from the input.

Kendall τ (τ-b, ties counted) of each pair of rankings; NaN for an example with fewer than
two content tokens or a constant score, which the findings leave out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy import stats
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.analyses import verdicts
from attnlab.analyses.claims import NotTestable, finding, source
from attnlab.analyses.divergences import total_variation
from attnlab.analyses.verdicts import ONE_POINT, Bar
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention

# a stage of its own in the report, though rule attention_permutation computes it
STAGE = "attention_ranking"
# The gradient importance (config explanation.gradient): Jain & Wallace's, with the attention
# held fixed, or through the attention too.
DETACHED, THROUGH_ATTENTION = "detached", "through_attention"
GRADIENTS = (DETACHED, THROUGH_ATTENTION)
# "Uncorrelated": a mean τ below 0.5, the value from which rank correlations are commonly
# called strong (our bar; the paper sets none).
WEAK_TAU = 0.5


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall τ-b of two scores of the same tokens (NaN: fewer than two, or one constant)."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(stats.kendalltau(a, b).statistic)


def _content(batch: dict[str, torch.Tensor], tokenizer: PreTrainedTokenizerBase
             ) -> torch.Tensor:
    """(B, S) True at the real, non-special tokens."""
    return batch["attention_mask"].bool() & ~examples.special_tokens_mask(batch["input_ids"],
                                                                          tokenizer)


def _word_embeddings(model: PreTrainedModel) -> torch.nn.Module:
    """The embedding of the input's words: BART's encoder's (its decoder reads the same words
    shifted by one, whose share of the gradient is left out), every other family's own."""
    encoder = model.get_encoder()
    return getattr(encoder, "embed_tokens", None) or model.get_input_embeddings()


def _attention_and_gradient(
    model: PreTrainedModel, batch: dict[str, torch.Tensor], gradient: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, S) attention from the classified token in the last layer (mean over heads), (B, S)
    gradient importance (`gradient`: one of GRADIENTS), and the output distributions (B, C),
    for one batch."""
    words = {}

    def differentiable(_module: torch.nn.Module, _inputs: Any, output: torch.Tensor
                       ) -> torch.Tensor:
        words["embedding"] = output.detach().requires_grad_()
        return words["embedding"]

    capture = Intervention(capture=True, detach=gradient == DETACHED)
    handle = _word_embeddings(model).register_forward_hook(differentiable)
    try:
        with torch.enable_grad():
            probs = torch.softmax(models.logits(model, batch, capture).double(), dim=-1)
            # examples are independent: the gradient of the sum is each example's own
            (grad,) = torch.autograd.grad(probs.max(dim=-1).values.sum(), words["embedding"])
    finally:
        handle.remove()
    importance = (grad * words["embedding"]).sum(dim=-1).abs().detach()
    lengths = batch["attention_mask"].sum(dim=1)
    rows = torch.tensor([models.classified_position(model, int(n)) for n in lengths])
    last = capture.probs[max(capture.probs)]  # (B, H, S, S)
    attention = last[torch.arange(len(rows)), :, rows].mean(dim=1)
    return attention.double(), importance.double(), probs.detach()


def _leave_one_out(
    model: PreTrainedModel, batch: dict[str, torch.Tensor], content: torch.Tensor,
    original: torch.Tensor, batch_size: int,
) -> list[np.ndarray]:
    """Per example of `batch`, the TVD of its output distribution from `original` (B, C) with
    each of its content tokens (`content`, (B, S)) removed, in position order. A variant is the
    example's padded row without that position, so its padding stays padding."""
    rows, positions = content.nonzero(as_tuple=True)
    width = content.shape[1]
    keep = torch.arange(width, device=content.device)[None] != positions[:, None]
    variants = {k: v[rows][keep].view(len(rows), width - 1) for k, v in batch.items()
                if v.dim() == 2}
    out = []
    with torch.no_grad():
        for _, part in examples.batches(variants, batch_size, content.device):
            out.append(torch.softmax(models.logits(model, part).double(), dim=-1))
    tvd = total_variation(original[rows], torch.cat(out)).cpu().numpy()
    return np.split(tvd, np.cumsum(content.sum(dim=1).cpu().numpy())[:-1])


def ranking_table(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    inputs: dict[str, torch.Tensor],
    batch_size: int = 64,
    *,
    gradient: str = DETACHED,
) -> pd.DataFrame:
    """Per example: tokens (content tokens ranked) and Kendall τ of attention and gradient
    importance (tau_gradient), of attention and leave-one-out importance (tau_loo), and of
    gradient and leave-one-out importance (tau_gradient_loo). `gradient`: one of GRADIENTS."""
    if gradient not in GRADIENTS:
        raise ValueError(f"gradient is one of {GRADIENTS}, not {gradient!r}")
    device = next(model.parameters()).device
    rows = []
    inputs, order = examples.by_length(inputs)
    for span, batch in examples.batches(inputs, batch_size, device):
        attention, importance, probs = _attention_and_gradient(model, batch, gradient)
        content = _content(batch, tokenizer)
        loo = _leave_one_out(model, batch, content, probs, batch_size)
        for offset, example in enumerate(order[span].tolist()):
            own = content[offset]
            att, grad = (attention[offset, own].cpu().numpy(),
                         importance[offset, own].cpu().numpy())
            rows.append({"example": example, "tokens": int(own.sum()),
                         "tau_gradient": kendall(att, grad), "tau_loo": kendall(att, loo[offset]),
                         "tau_gradient_loo": kendall(grad, loo[offset])})
    return pd.DataFrame(rows).sort_values("example", ignore_index=True)


def claims(table: pd.DataFrame, *, gradient: str) -> list[dict[str, Any]]:
    """Jain & Wallace's §4.1 statements, judged on one task's per-example τ (`gradient`: the
    gradient importance it was computed with, one of GRADIENTS), each with its interval over
    the examples where τ is defined.

    "Attention ranks tokens unlike gradient and leave-one-out importance" is judged twice: by
    mean τ below WEAK_TAU (our bar), and as Jain & Wallace's code compares it, by the paired
    differences over the same examples of τ(gradient, leave-one-out) and each τ of attention:
    the two importances must agree with each other more than attention agrees with either.
    """

    def interval(columns: list[str], paired: bool = False) -> verdicts.Interval | NotTestable:
        values = table[columns].dropna()
        if values.empty:
            return NotTestable("no example has two content tokens with distinct scores")
        if paired:
            return verdicts.difference(values[columns[0]].to_numpy(),
                                       values[columns[1]].to_numpy(), paired=True)
        return verdicts.bootstrap(values[columns[0]].to_numpy(), scale=verdicts.SIGNED_UNIT)

    ours = (f"holds below {WEAK_TAU}: our choice, where rank correlations are commonly called "
            "strong; the paper sets no bar")
    over = "95 % interval over the examples with two or more content tokens"
    importance = ("|gradient . input|, the attention detached" if gradient == DETACHED
                  else "|gradient . input|, through the attention")
    margin = f"holds above {ONE_POINT}: one point, our margin for a comparison of correlations"

    def agree_more(other: str, column: str) -> dict[str, Any]:
        return finding(
            STAGE, f"gradient and leave-one-out importance agree more than attention and {other}",
            f"mean Kendall tau of gradient importance ({importance}) and leave-one-out "
            f"importance minus that of attention and {other} importance, paired {over} "
            f"({margin})",
            interval(["tau_gradient_loo", column], paired=True), Bar(ONE_POINT),
            source("jain2019", "gradient_loo_agree"))

    return [
        finding(STAGE, "attention ranks tokens unlike gradient importance",
                f"mean Kendall tau of last-layer attention from the classified token (mean over "
                f"heads) and gradient importance ({importance}) over each example's content "
                f"tokens, {over} ({ours})",
                interval(["tau_gradient"]), Bar(WEAK_TAU, "below"),
                source("jain2019", "gradients")),
        finding(STAGE, "attention ranks tokens unlike leave-one-out importance",
                f"mean Kendall tau of the same attention and the output's TVD with each token "
                f"left out, {over} ({ours})",
                interval(["tau_loo"]), Bar(WEAK_TAU, "below"),
                source("jain2019", "leave_one_out")),
        agree_more("leave-one-out", "tau_loo"),
        agree_more("gradient", "tau_gradient"),
    ]
