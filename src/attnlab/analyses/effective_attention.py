"""Effective attention (Brunner et al. 2020 §3, docs/methods.md): how much of an attention map the
head's output actually depends on.

A head outputs A·T, T the value vectors of the n real tokens (n × d_v, T = E W^V + b; padding
is left out, since padded rows would add a null space of their own). Any row vector in the
left null space LN(T) can be added to a row of A without changing A·T. With N an orthonormal
basis of LN(T) (from a full SVD of T),

    A_eff = A − A N Nᵀ

is the part of A the output depends on. LN(T) is empty, so A_eff = A, when n ≤ rank T ≤ d_v;
beyond d_v attention is not identifiable, and A_eff has negative entries and rows that do
not sum to 1.

Per example, layer and head we record the dimension of LN(T), the Pearson r of A and A_eff
over all n × n entries, and the mean attention mass (raw and effective) that a query gives
to [CLS], [SEP], punctuation and — on synthetic tasks, which have no punctuation — filler
words, the tokens that carry no content.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.analyses.claims import claim
from attnlab.data import synthetic
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention

CATEGORIES = ("[CLS]", "[SEP]", "punctuation", "filler")
# Word-piece markers (BERT "##", byte-level BPE "Ġ", SentencePiece "▁") are not part of a word.
SUBWORD_MARKERS = ("##", "Ġ", "▁")
# A_eff = A exactly when LN(T) is empty; 1e-6 leaves room for float64 rounding only.
IDENTICAL = 1e-6
# The synthetic tasks' filler words: every word that is neither a planted nor a trigger word.
FILLER_WORDS = set(synthetic.vocabulary()) - {
    word for kind in synthetic.SYNTHETIC_KINDS
    for pair in (*synthetic.planted_pairs(kind), *synthetic.trigger_pairs(kind).values())
    for word in pair
}


def effective_attention(
    attention: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A_eff = A − A N Nᵀ for a batch of heads, in float64.

    attention (..., n, n) and values (..., n, d_v) cover the real tokens only. Returns A_eff
    and the dimension of the left null space of the values, n − rank T, per head (...).
    """
    t = values.double()
    n, d_v = t.shape[-2:]
    u, s, _ = torch.linalg.svd(t, full_matrices=True)
    # numpy's matrix_rank tolerance: singular values below it are rounding noise
    tolerance = s.amax(dim=-1, keepdim=True) * max(n, d_v) * torch.finfo(torch.float64).eps
    rank = (s > tolerance).sum(dim=-1)
    in_null_space = torch.arange(n, device=t.device) >= rank[..., None]  # columns of U
    basis = u * in_null_space[..., None, :]
    a = attention.double()
    return a - a @ basis @ basis.transpose(-1, -2), n - rank


def _pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pearson r over the last dimension (NaN where either side is constant)."""
    x = x - x.mean(dim=-1, keepdim=True)
    y = y - y.mean(dim=-1, keepdim=True)
    return (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1))


def token_category(token: str, tokenizer: PreTrainedTokenizerBase, token_id: int) -> str | None:
    """Which of CATEGORIES a token belongs to (None: none of them)."""
    if token_id == tokenizer.cls_token_id:
        return "[CLS]"
    if token_id == tokenizer.sep_token_id:
        return "[SEP]"
    word = token
    for marker in SUBWORD_MARKERS:
        word = word.replace(marker, "")
    if word and all(unicodedata.category(ch).startswith("P") for ch in word):
        return "punctuation"
    if word.lower() in FILLER_WORDS:
        return "filler"
    return None


def head_statistics(
    attention: torch.Tensor, values: torch.Tensor, categories: list[str | None]
) -> dict[str, np.ndarray]:
    """Statistics of one example's heads: attention (L, H, n, n), values (L, H, n, d_v) of its n
    real tokens, and the category of each token. Arrays are (L, H), masses (L, H) per category."""
    eff, null_dim = effective_attention(attention, values)
    raw = attention.double()
    stats = {
        "null_dim": null_dim,
        "pearson_r": _pearson(raw.flatten(-2), eff.flatten(-2)),
        "max_change": (eff - raw).abs().amax(dim=(-2, -1)),
        "negative_share": (eff < 0).double().mean(dim=(-2, -1)),
        "row_sum_error": (eff.sum(dim=-1) - 1).abs().amax(dim=-1),
    }
    for category in CATEGORIES:
        keys = torch.tensor([c == category for c in categories], device=raw.device)
        # the mass a query row gives to the category's tokens, averaged over query rows
        stats[f"raw {category}"] = raw[..., keys].sum(-1).mean(-1)
        stats[f"effective {category}"] = eff[..., keys].sum(-1).mean(-1)
    return {k: v.cpu().numpy() for k, v in stats.items()}


def analyse_examples(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    inputs: dict[str, torch.Tensor],
    batch_size: int = 64,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Effective attention of every example, layer and head.

    Returns the per-head table (example, length, layer, head, null_dim, pearson_r, max_change,
    negative_share, row_sum_error) and the attention-mass table (example, length, layer, head,
    category, raw, effective); category rows exist only when the example has such a token.
    """
    device = next(model.parameters()).device
    heads_rows, mass_rows = [], []
    progress = tqdm(total=len(inputs["input_ids"]), desc="effective attention", mininterval=5)
    for rows, batch in examples.batches(inputs, batch_size, device):
        capture = Intervention(capture=True, capture_values=True)
        with torch.no_grad():
            models.logits(model, batch, capture)
        probs = torch.stack([capture.probs[i] for i in sorted(capture.probs)], dim=1)
        values = torch.stack([capture.values[i] for i in sorted(capture.values)], dim=1)
        for offset, example in enumerate(range(rows.start, rows.stop)):
            real = batch["attention_mask"][offset].bool()
            ids = batch["input_ids"][offset][real].tolist()
            tokens = tokenizer.convert_ids_to_tokens(ids)
            categories = [token_category(t, tokenizer, i) for t, i in zip(tokens, ids, strict=True)]
            attention = probs[offset][..., real, :][..., real]
            stats = head_statistics(attention, values[offset][..., real, :], categories)
            layers, heads = np.indices(stats["null_dim"].shape)
            base = {"example": example, "length": len(ids), "layer": layers.ravel(),
                    "head": heads.ravel()}
            heads_rows.append(pd.DataFrame({**base, **{
                k: stats[k].ravel() for k in ("null_dim", "pearson_r", "max_change",
                                              "negative_share", "row_sum_error")}}))
            mass_rows += [pd.DataFrame({**base, "category": category,
                                        "raw": stats[f"raw {category}"].ravel(),
                                        "effective": stats[f"effective {category}"].ravel()})
                          for category in CATEGORIES if category in categories]
            progress.update()
    progress.close()
    return pd.concat(heads_rows, ignore_index=True), pd.concat(mass_rows, ignore_index=True)


def claims(per_head: pd.DataFrame, mass: pd.DataFrame, d_v: int) -> list[dict[str, Any]]:
    """Brunner et al.'s statements on effective attention, judged on one task's tables.

    The three statements about sequences longer than d_v are "not testable" when the task has
    none (then attention is identifiable for every example)."""
    short, long_ = per_head[per_head["length"] <= d_v], per_head[per_head["length"] > d_v]
    stage = "effective_attention"
    out = []
    if len(short):
        change = short["max_change"].max()
        out.append(claim(stage, f"attention is identifiable up to d_v = {d_v} tokens (A_eff = A)",
                         f"largest |A_eff - A| over sequences of <= {d_v} tokens (holds if <= "
                         f"{IDENTICAL:g})", change, change <= IDENTICAL))
    lengths = long_["length"].nunique()
    r_trend = (np.corrcoef(long_["length"], long_["pearson_r"])[0, 1] if lengths > 1
               else float("nan"))
    out.append(claim(stage, "beyond d_v, r(A, A_eff) falls as sequences get longer",
                     f"Pearson r of sequence length and r(A, A_eff) over sequences of > {d_v} "
                     f"tokens (holds if < 0; {long_['example'].nunique()} such examples)",
                     r_trend, None if lengths < 2 else r_trend < 0))
    negative = long_["negative_share"].mean() if len(long_) else float("nan")
    out.append(claim(stage, "beyond d_v, effective attention is not a probability distribution",
                     f"mean share of negative A_eff entries over sequences of > {d_v} tokens "
                     "(holds if > 0)", negative, None if long_.empty else negative > 0))
    sep = mass[(mass["length"] > d_v) & (mass["category"] == "[SEP]")]
    shift = (sep["effective"] - sep["raw"]).mean() if len(sep) else float("nan")
    out.append(claim(stage, "effective attention to [SEP] is lower than raw attention",
                     f"mean effective minus raw attention mass on [SEP] over sequences of > {d_v} "
                     "tokens (holds if < 0)", shift, None if sep.empty else shift < 0))
    return out

