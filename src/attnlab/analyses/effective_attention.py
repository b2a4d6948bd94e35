"""Effective attention (Brunner et al. 2020 §3, docs/methods.md): how much of an attention map the
head's output actually depends on.

A head outputs A·T, T the value vectors of the n real tokens (n × d_v, T = E W^V + b; padding
is left out, since padded rows would add a null space of their own). Any row vector in the
left null space LN(T) can be added to a row of A without changing A·T. With N an orthonormal
basis of LN(T) (from a full SVD of T),

    A_eff = A − A N Nᵀ

is the part of A the output depends on, and A N Nᵀ the part it does not: the non-identifiable
component. dim LN(T) = n − rank T, and rank T ≤ min(n, d_v): beyond d_v tokens LN(T) has at
least n − d_v dimensions whatever the weights, so attention is not identifiable; up to d_v it
is empty, and A_eff = A, unless the value vectors happen to be linearly dependent — which the
rank test below checks on every head.

Per example, layer and head we record d_v, the dimension of LN(T), σ_min/σ_max of T (how far
T is from losing rank), the relative size ‖A − A_eff‖_F / ‖A‖_F of the non-identifiable
component, the Pearson r of A and A_eff over all n × n entries, and the mean attention mass
(raw and effective) that a query gives to [CLS], [SEP], punctuation and — on synthetic tasks,
which have no punctuation — filler words, the tokens that carry no content.
"""

from __future__ import annotations

import copy
import unicodedata
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.analyses.claims import NotTestable, claim
from attnlab.data import synthetic
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention

CATEGORIES = ("[CLS]", "[SEP]", "punctuation", "filler")
# The per-head statistics, columns of the per-head table after example, length, layer, head.
HEAD_COLUMNS = ("d_v", "null_dim", "singular_ratio", "relative_change", "pearson_r", "max_change",
                "negative_share", "row_sum_error")
# Word-piece markers (BERT "##", byte-level BPE "Ġ", SentencePiece "▁") are not part of a word.
SUBWORD_MARKERS = ("##", "Ġ", "▁")
# A_eff = A exactly when LN(T) is empty (no column of U is kept); 1e-6 leaves room for float64
# rounding only.
IDENTICAL = 1e-6
# The synthetic tasks' filler words: every word that is neither a planted nor a trigger word.
FILLER_WORDS = set(synthetic.vocabulary()) - {
    word for kind in synthetic.SYNTHETIC_KINDS
    for pair in (*synthetic.planted_pairs(kind), *synthetic.trigger_pairs(kind).values())
    for word in pair
}


def null_space(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The left null space LN(T) of a batch of value matrices T (..., n, d_v).

    Returns an orthonormal basis of it as (..., n, n) columns (the columns beyond its dimension
    are zero), its dimension n − rank T (...), and σ_min/σ_max of T (...), σ_min the smallest of
    its min(n, d_v) singular values: how far T is from losing a rank. Computed in float64.

    Rank tolerance σ_max · max(n, d_v) · eps, eps that of the dtype T was computed in (numpy's
    matrix_rank rule): T is known only to its own rounding, so a singular value below that
    cannot be told from zero. float64's eps on float32 values would count the rounding noise
    of a truly dependent row as rank."""
    eps = torch.finfo(values.dtype).eps
    t = values.double()
    n, d_v = t.shape[-2:]
    u, s, _ = torch.linalg.svd(t, full_matrices=True)
    largest = s.amax(dim=-1, keepdim=True)
    rank = (s > largest * max(n, d_v) * eps).sum(dim=-1)
    in_null_space = torch.arange(n, device=t.device) >= rank[..., None]  # columns of U
    return u * in_null_space[..., None, :], n - rank, s[..., -1] / largest[..., 0]


def _without(attention: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """A − A N Nᵀ in float64: A with its rows' components in LN(T) removed."""
    a = attention.double()
    return a - a @ basis @ basis.transpose(-1, -2)


def effective_attention(
    attention: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A_eff = A − A N Nᵀ for a batch of heads, in float64.

    attention (..., n, n) and values (..., n, d_v) cover the real tokens only. Returns A_eff
    and the dimension of the left null space of the values, n − rank T, per head (...).
    """
    basis, null_dim, _ = null_space(values)
    return _without(attention, basis), null_dim


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
    basis, null_dim, singular_ratio = null_space(values)
    eff = _without(attention, basis)
    raw = attention.double()
    stats = {
        "d_v": torch.full_like(null_dim, values.shape[-1]),
        "null_dim": null_dim,
        "singular_ratio": singular_ratio,
        "relative_change": (eff - raw).flatten(-2).norm(dim=-1) / raw.flatten(-2).norm(dim=-1),
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
    """Effective attention of every example, layer and head, computed in float64.

    Returns the per-head table (example, length, layer, head and HEAD_COLUMNS; d_v is read off
    the captured value vectors) and the attention-mass table (example, length, layer, head,
    category, raw, effective); category rows exist only when the example has such a token.
    """
    # A float64 copy, whatever precision the model runs in, so that the rank of T is decided
    # far from rounding: MiniLM's value matrices at n = d_v = 32 have σ_min/σ_max down to 5e-7
    # (real: the same in float32 and float64), inside float32's rank tolerance (32 · 1.2e-7 ≈
    # 4e-6) but seven orders of magnitude above float64's.
    model = copy.deepcopy(model).double()
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
                k: stats[k].ravel() for k in HEAD_COLUMNS}}))
            mass_rows += [pd.DataFrame({**base, "category": category,
                                        "raw": stats[f"raw {category}"].ravel(),
                                        "effective": stats[f"effective {category}"].ravel()})
                          for category in CATEGORIES if category in categories]
            progress.update()
    progress.close()
    return pd.concat(heads_rows, ignore_index=True), pd.concat(mass_rows, ignore_index=True)


def _heads_of(side: pd.DataFrame, which: str) -> str:
    """How many heads and examples a statistic is taken over, e.g. "72 heads of 1 example of
    <= 32 tokens"."""
    examples_ = side["example"].nunique()
    return f"{len(side)} heads of {examples_} example{'s' * (examples_ != 1)} of {which} tokens"


def _identifiability_claims(per_head: pd.DataFrame, d_v: int) -> list[dict[str, Any]]:
    """The rank argument tested on both sides of d_v: the share of heads whose values have a
    non-trivial left null space (predicted 0 up to d_v tokens, 1 beyond), and the size of the
    non-identifiable component ‖A − A_eff‖_F / ‖A‖_F. A side without examples is "not
    testable", with no value (NaN)."""
    stage = "effective_attention"
    short, long_ = per_head[per_head["length"] <= d_v], per_head[per_head["length"] > d_v]
    null_short = (short["null_dim"] > 0).mean() if len(short) else float("nan")
    change_short = short["relative_change"].max() if len(short) else float("nan")
    null_long = (long_["null_dim"] > 0).mean() if len(long_) else float("nan")
    change_long = long_["relative_change"].median() if len(long_) else float("nan")
    at_bound = (long_["null_dim"] == long_["length"] - d_v).mean() if len(long_) else float("nan")
    margin = short["singular_ratio"].min() if len(short) else float("nan")
    within = f"<= {d_v}"
    no_short = NotTestable(f"no example of at most d_v = {d_v} tokens")
    no_long = NotTestable(f"no example of more than d_v = {d_v} tokens")
    beyond = f"> {d_v}"
    return [
        claim(stage, "attention weights are identifiable up to d_v tokens: the values' left null "
              "space is empty",
              f"share of heads whose value vectors T have a non-trivial left null space, over "
              f"{_heads_of(short, within)} (holds if 0; rank tolerance sigma_max * max(n, d_v) "
              f"* float64 eps; smallest sigma_min / sigma_max of T seen: {margin:.2g})",
              null_short, no_short if short.empty else null_short == 0),
        claim(stage, "attention is identifiable up to d_v tokens (A_eff = A)",
              f"largest ||A - A_eff||_F / ||A||_F over {_heads_of(short, within)} (holds if <= "
              f"{IDENTICAL:g})", change_short,
              no_short if short.empty else change_short <= IDENTICAL),
        claim(stage, "beyond d_v tokens attention weights are not identifiable: the values' left "
              "null space is non-trivial",
              f"share of heads whose value vectors T have a non-trivial left null space, over "
              f"{_heads_of(long_, beyond)} (holds if 1; {at_bound:.0%} of them have exactly "
              "n - d_v dimensions, the rank bound)",
              null_long, no_long if long_.empty else null_long == 1),
        claim(stage, "beyond d_v tokens part of the attention does not reach the head's output "
              "(A_eff differs from A)",
              f"median ||A - A_eff||_F / ||A||_F over {_heads_of(long_, beyond)} (holds if > "
              f"{IDENTICAL:g})", change_long, no_long if long_.empty else change_long > IDENTICAL),
    ]


def claims(per_head: pd.DataFrame, mass: pd.DataFrame, d_v: int) -> list[dict[str, Any]]:
    """Brunner et al.'s statements on effective attention, judged on one task's tables.

    Statements about sequences of at most d_v tokens are "not testable" when the task has none
    (the tiny default models: d_v = 8), those about longer ones when it has none."""
    stage = "effective_attention"
    long_ = per_head[per_head["length"] > d_v]
    out = _identifiability_claims(per_head, d_v)
    lengths = long_["length"].nunique()
    r_trend = (np.corrcoef(long_["length"], long_["pearson_r"])[0, 1] if lengths > 1
               else float("nan"))
    out.append(claim(stage, "beyond d_v, r(A, A_eff) falls as sequences get longer",
                     f"Pearson r of sequence length and r(A, A_eff) over sequences of > {d_v} "
                     f"tokens (holds if < 0; {long_['example'].nunique()} such examples)",
                     r_trend, NotTestable(f"fewer than two sequence lengths above d_v = {d_v}")
                     if lengths < 2 else r_trend < 0))
    negative = long_["negative_share"].mean() if len(long_) else float("nan")
    out.append(claim(stage, "beyond d_v, effective attention is not a probability distribution",
                     f"mean share of negative A_eff entries over sequences of > {d_v} tokens "
                     "(holds if > 0)", negative,
                     NotTestable(f"no example of more than d_v = {d_v} tokens")
                     if long_.empty else negative > 0))
    sep = mass[(mass["length"] > d_v) & (mass["category"] == "[SEP]")]
    shift = (sep["effective"] - sep["raw"]).mean() if len(sep) else float("nan")
    out.append(claim(stage, "effective attention to [SEP] is lower than raw attention",
                     f"mean effective minus raw attention mass on [SEP] over sequences of > {d_v} "
                     "tokens (holds if < 0)", shift,
                     NotTestable(f"no [SEP] in an example of more than d_v = {d_v} tokens")
                     if sep.empty else shift < 0))
    return out

