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
is empty, and A_eff = A, unless the value vectors are linearly dependent — which the rank test
below checks on every head. One dependence is structural: a value vector equal to an earlier
one. Where positions enter only queries and keys (rotary positions: Llama, Qwen2, Mistral), a
token repeated in the input has the same value vector in layer 0 wherever it stands, and the
attention split between its copies is not identifiable at any length; the checks count such
repeated value vectors apart (`repeated_values`).

Per example, layer and head we record d_v, the dimension of LN(T), σ_min/σ_max of T (how far
T is from losing rank), the relative size ‖A − A_eff‖_F / ‖A‖_F of the non-identifiable
component, the Pearson r of A and A_eff over all n × n entries, and the mean attention mass
(raw and effective) that a query gives to [CLS], [SEP], a decoder's <s>, punctuation and — on
synthetic tasks, which have no punctuation — filler words, the tokens that carry no content.

A decoder's attention is causal: row i of A weighs only the keys its mask allows (j <= i, and
within the window of a sliding-window layer), and A·T's row i is Σ_j A_ij T_j over those keys
alone. The null-space argument is then per row: a change of row i that leaves its output alone
is a vector in the left null space of T_i, the values of row i's keys, and a change anywhere else
would attend to the future, which the model cannot. So a decoder's A_eff is computed row by row,
row i with LN(T_i) (`effective_attention(..., allowed=...)`), and keeps the causal mask; its
row i is identifiable up to d_v keys, and the per-head null_dim is the largest row's (the last
row's: all n keys, unless a window cuts them).
"""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.analyses import verdicts
from attnlab.analyses.claims import NotTestable, claim, finding, source
from attnlab.analyses.verdicts import ONE_POINT, Bar
from attnlab.data import synthetic
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention

STAGE = "effective_attention"
# [BOS]: a decoder's first token <s> (an encoder's <s> is its [CLS])
CATEGORIES = ("[CLS]", "[SEP]", "[BOS]", "punctuation", "filler")
# The per-head statistics, columns of the per-head table after example, length, layer, head.
HEAD_COLUMNS = ("d_v", "null_dim", "repeated_values", "singular_ratio", "relative_change",
                "pearson_r", "max_change", "negative_share", "row_sum_error")
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


def repeated_values(values: torch.Tensor) -> torch.Tensor:
    """Per head (...), how many of the n value vectors of T (..., n, d_v) equal an earlier one:
    each adds a dimension to LN(T) at any n. Equal within rounding, as the rank is decided
    (`null_space`): a distance of at most the largest vector's norm · max(n, d_v) · eps."""
    eps = torch.finfo(values.dtype).eps
    t = values.double()
    n, d_v = t.shape[-2:]
    distance = torch.cdist(t, t, compute_mode="donot_use_mm_for_euclid_dist")
    tolerance = t.norm(dim=-1).amax(dim=-1)[..., None, None] * max(n, d_v) * eps
    earlier = torch.ones(n, n, dtype=torch.bool, device=t.device).tril(-1)
    return ((distance <= tolerance) & earlier).any(dim=-1).sum(dim=-1)


def _without(attention: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """A − A N Nᵀ in float64: A with its rows' components in LN(T) removed."""
    a = attention.double()
    return a - a @ basis @ basis.transpose(-1, -2)


def _row_by_row(
    attention: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A_eff of masked attention, row by row in float64: row i of A on the keys it may attend
    to (allowed[..., i, :]) with its component in LN(T_i) removed, T_i those keys' values; 0 on
    the keys it may not. Returns A_eff, and per head (...) the largest null dimension and the
    smallest σ_min/σ_max of any row's T_i."""
    a = attention.double()
    allowed = allowed.expand(a.shape)
    eff = torch.zeros_like(a)
    null_dim = torch.zeros(a.shape[:-2], dtype=torch.long, device=a.device)
    ratio = torch.ones(a.shape[:-2], dtype=torch.float64, device=a.device)
    for head in np.ndindex(*a.shape[:-2]):
        for row in range(a.shape[-2]):
            keys = allowed[head][row]
            basis, dim, singular_ratio = null_space(values[head][keys])
            eff[head][row, keys] = _without(a[head][row, keys][None], basis)[0]
            null_dim[head] = max(int(null_dim[head]), int(dim))
            ratio[head] = min(float(ratio[head]), float(singular_ratio))
    return eff, null_dim, ratio


def effective_attention(
    attention: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A_eff = A − A N Nᵀ for a batch of heads, in float64.

    attention (..., n, n) and values (..., n, d_v) cover the real tokens only; allowed
    (broadcastable to (..., n, n), bool), a decoder's: the keys each row's mask lets it attend
    to, each row then with the null space of its own keys' values. Returns A_eff and the
    dimension of the left null space of the values, n − rank T, per head (...) (with `allowed`:
    the largest row's).
    """
    if allowed is not None:
        eff, null_dim, _ = _row_by_row(attention, values, allowed)
        return eff, null_dim
    basis, null_dim, _ = null_space(values)
    return _without(attention, basis), null_dim


def _pearson(x: torch.Tensor, y: torch.Tensor, entries: torch.Tensor) -> torch.Tensor:
    """Pearson r over the last dimension's entries where `entries` (bool) is true (NaN where
    either side is constant)."""
    kept = entries.double()
    count = kept.sum(dim=-1, keepdim=True)
    x = (x - (x * kept).sum(dim=-1, keepdim=True) / count) * kept
    y = (y - (y * kept).sum(dim=-1, keepdim=True) / count) * kept
    return (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1))


def token_category(token: str, tokenizer: PreTrainedTokenizerBase, token_id: int) -> str | None:
    """Which of CATEGORIES a token belongs to (None: none of them)."""
    if token_id == tokenizer.cls_token_id:
        return "[CLS]"
    if token_id == tokenizer.sep_token_id:
        return "[SEP]"
    if token_id == tokenizer.bos_token_id:
        return "[BOS]"
    word = token
    for marker in SUBWORD_MARKERS:
        word = word.replace(marker, "")
    if word and all(unicodedata.category(ch).startswith("P") for ch in word):
        return "punctuation"
    if word.lower() in FILLER_WORDS:
        return "filler"
    return None


def head_statistics(
    attention: torch.Tensor, values: torch.Tensor, categories: list[str | None],
    allowed: torch.Tensor | None = None,
) -> dict[str, np.ndarray]:
    """Statistics of one example's heads: attention (L, H, n, n), values (L, H, n, d_v) of its n
    real tokens, and the category of each token; allowed (L, 1, n, n), a decoder's: the entries
    its masks allow, the only ones r(A, A_eff) and the share of negative entries are taken
    over (the masked zeros would inflate r). Arrays are (L, H), masses (L, H) per category."""
    raw = attention.double()
    if allowed is None:
        basis, null_dim, singular_ratio = null_space(values)
        eff = _without(attention, basis)
        allowed = torch.ones_like(raw, dtype=torch.bool)
    else:
        eff, null_dim, singular_ratio = _row_by_row(attention, values, allowed)
        allowed = allowed.expand(raw.shape)
    entries = allowed.flatten(-2)
    stats = {
        "d_v": torch.full_like(null_dim, values.shape[-1]),
        "null_dim": null_dim,
        "repeated_values": repeated_values(values),
        "singular_ratio": singular_ratio,
        "relative_change": (eff - raw).flatten(-2).norm(dim=-1) / raw.flatten(-2).norm(dim=-1),
        "pearson_r": _pearson(raw.flatten(-2), eff.flatten(-2), entries),
        "max_change": (eff - raw).abs().amax(dim=(-2, -1)),
        "negative_share": ((eff.flatten(-2) < 0) & entries).sum(-1) / entries.sum(-1),
        "row_sum_error": (eff.sum(dim=-1) - 1).abs().amax(dim=-1),
    }
    for category in CATEGORIES:
        keys = torch.tensor([c == category for c in categories], device=raw.device)
        # the mass a query row gives to the category's tokens, averaged over query rows
        stats[f"raw {category}"] = raw[..., keys].sum(-1).mean(-1)
        stats[f"effective {category}"] = eff[..., keys].sum(-1).mean(-1)
    return {k: v.cpu().numpy() for k, v in stats.items()}


def allowed_keys(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """(B, L, 1, S, S) bool: the keys each query of each layer may attend to, read off the
    masks the decoder's layers take (causal, sliding window where a layer has one); None for
    an encoder, whose real tokens all see each other."""
    if not models.family_of(model).causal:
        return None
    context = models.layer_inputs(model, models.embed(model, batch), batch["attention_mask"])
    return torch.stack([context.masks[kind] == 0 for kind in context.types], dim=1)


def _heads_of_batch(
    model: PreTrainedModel, batch: dict[str, torch.Tensor]
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """Per example of a batch: its attention (L, H, n, n), value vectors (L, H, n, d_v) and, a
    decoder's, allowed keys (L, 1, n, n), over its n real tokens."""
    capture = Intervention(capture=True, capture_values=True)
    with torch.no_grad():
        models.logits(model, batch, capture)
    probs = torch.stack([capture.probs[i] for i in sorted(capture.probs)], dim=1)
    values = torch.stack([capture.values[i] for i in sorted(capture.values)], dim=1)
    allowed = allowed_keys(model, batch)
    for offset, mask in enumerate(batch["attention_mask"].bool()):
        yield (probs[offset][..., mask, :][..., mask], values[offset][..., mask, :],
               None if allowed is None else allowed[offset][..., mask, :][..., mask])


def effective_maps(model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> list[np.ndarray]:
    """A_eff (L, H, n, n) of every example of a tokenized batch, over its n real tokens, in
    float64 (a float64 copy of the model, as `analyse_examples` computes it)."""
    model = copy.deepcopy(model).double()
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in inputs.items() if k != "labels"}
    return [effective_attention(attention, values, allowed)[0].cpu().numpy()
            for attention, values, allowed in _heads_of_batch(model, batch)]


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
    inputs, order = examples.by_length(inputs)
    for rows, batch in examples.batches(inputs, batch_size, device):
        for offset, (attention, values, allowed) in enumerate(_heads_of_batch(model, batch)):
            example = int(order[rows.start + offset])
            real = batch["attention_mask"][offset].bool()
            ids = batch["input_ids"][offset][real].tolist()
            tokens = tokenizer.convert_ids_to_tokens(ids)
            categories = [token_category(t, tokenizer, i) for t, i in zip(tokens, ids, strict=True)]
            stats = head_statistics(attention, values, categories, allowed)
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
    # a decoder's prompts may have no token of any category (no [CLS], [SEP], punctuation)
    mass = (pd.concat(mass_rows, ignore_index=True) if mass_rows else pd.DataFrame(
        columns=["example", "length", "layer", "head", "category", "raw", "effective"]))
    return tuple(table.sort_values("example", kind="stable", ignore_index=True)
                 for table in (pd.concat(heads_rows, ignore_index=True), mass))


def _heads_of(side: pd.DataFrame, which: str) -> str:
    """How many heads and examples a statistic is taken over, e.g. "72 heads of 1 example of
    <= 32 tokens"."""
    examples_ = side["example"].nunique()
    return f"{len(side)} heads of {examples_} example{'s' * (examples_ != 1)} of {which} tokens"


def _identifiability_checks(per_head: pd.DataFrame, d_v: int) -> list[dict[str, Any]]:
    """The rank argument checked on both sides of d_v (rank–nullity: checks, not findings): the
    share of heads whose values have a non-trivial left null space (0 up to d_v tokens, beyond
    what repeated value vectors put there; 1 beyond), and the size of the non-identifiable
    component ‖A − A_eff‖_F / ‖A‖_F (up to d_v: of the heads without repeated value vectors).
    A side without examples is "not testable", with no value (NaN)."""
    short, long_ = per_head[per_head["length"] <= d_v], per_head[per_head["length"] > d_v]
    distinct = short[short["repeated_values"] == 0]
    repeats = (f"; {len(short) - len(distinct)} heads with repeated value vectors left out, "
               "whose copies split attention unidentifiably" if len(distinct) < len(short) else "")
    null_short = ((short["null_dim"] > short["repeated_values"]).mean() if len(short)
                  else float("nan"))
    change_short = distinct["relative_change"].max() if len(distinct) else float("nan")
    null_long = (long_["null_dim"] > 0).mean() if len(long_) else float("nan")
    change_long = long_["relative_change"].median() if len(long_) else float("nan")
    at_bound = (long_["null_dim"] == long_["length"] - d_v).mean() if len(long_) else float("nan")
    margin = short["singular_ratio"].min() if len(short) else float("nan")
    within = f"<= {d_v}"
    no_short = NotTestable(f"no example of at most d_v = {d_v} tokens")
    no_distinct = NotTestable(f"every head of the examples of at most d_v = {d_v} tokens has "
                              "repeated value vectors")
    no_long = NotTestable(f"no example of more than d_v = {d_v} tokens")
    beyond = f"> {d_v}"
    return [
        claim(STAGE, "attention weights are identifiable up to d_v tokens: the values' left null "
              "space is empty",
              f"share of heads whose value vectors T have a left null space of more dimensions "
              f"than their repeated vectors (one equal to an earlier one) add, over "
              f"{_heads_of(short, within)} (holds if 0; rank tolerance sigma_max * max(n, d_v) "
              f"* float64 eps; smallest sigma_min / sigma_max of T seen: {margin:.2g})",
              null_short, no_short if short.empty else null_short == 0, kind="check"),
        claim(STAGE, "attention is identifiable up to d_v tokens (A_eff = A)",
              f"largest ||A - A_eff||_F / ||A||_F over {_heads_of(short, within)} (holds if <= "
              f"{IDENTICAL:g}{repeats})", change_short,
              no_short if short.empty else no_distinct if distinct.empty
              else change_short <= IDENTICAL, kind="check"),
        claim(STAGE, "beyond d_v tokens attention weights are not identifiable: the values' left "
              "null space is non-trivial",
              f"share of heads whose value vectors T have a non-trivial left null space, over "
              f"{_heads_of(long_, beyond)} (holds if 1; {at_bound:.0%} of them have exactly "
              "n - d_v dimensions, the rank bound)",
              null_long, no_long if long_.empty else null_long == 1, kind="check"),
        claim(STAGE, "beyond d_v tokens part of the attention does not reach the head's output "
              "(A_eff differs from A)",
              f"median ||A - A_eff||_F / ||A||_F over {_heads_of(long_, beyond)} (holds if > "
              f"{IDENTICAL:g})", change_long, no_long if long_.empty else change_long > IDENTICAL,
              kind="check"),
    ]


def correlation(sample: np.ndarray) -> np.ndarray:
    """Pearson r of the two columns of each resample (resamples, units, 2); 0 for a resample
    in which either column is constant (no trend can be seen in it)."""
    x = sample[..., 0] - sample[..., 0].mean(axis=1, keepdims=True)
    y = sample[..., 1] - sample[..., 1].mean(axis=1, keepdims=True)
    scale = np.sqrt((x**2).sum(axis=1) * (y**2).sum(axis=1))
    return np.divide((x * y).sum(axis=1), scale, out=np.zeros(len(sample)), where=scale > 0)


def _length_trend(long_: pd.DataFrame, d_v: int) -> verdicts.Interval | NotTestable:
    """Pearson r of length and each example's mean r(A, A_eff) over its heads, with its
    interval over the examples longer than d_v."""
    per_example = long_.groupby("example").agg(length=("length", "first"),
                                                r=("pearson_r", "mean"))
    if per_example["length"].nunique() < 2:
        return NotTestable(f"fewer than two sequence lengths above d_v = {d_v}")
    return verdicts.bootstrap(per_example[["length", "r"]].to_numpy(), correlation,
                              scale=verdicts.SIGNED_UNIT)


def _sep_shift(mass: pd.DataFrame, d_v: int, decoder: bool) -> verdicts.Interval | NotTestable:
    """Each example's mean over layers and heads of effective minus raw attention mass on
    [SEP], with its interval over the examples longer than d_v."""
    if decoder:
        return NotTestable("a decoder language model has no [SEP]: the statement is about "
                           "BERT's separator token")
    sep = mass[(mass["length"] > d_v) & (mass["category"] == "[SEP]")]
    if sep.empty:
        return NotTestable(f"no [SEP] in an example of more than d_v = {d_v} tokens")
    shift = (sep["effective"] - sep["raw"]).groupby(sep["example"]).mean()
    return verdicts.bootstrap(shift.to_numpy())


def claims(per_head: pd.DataFrame, mass: pd.DataFrame, d_v: int,
           decoder: bool = False) -> list[dict[str, Any]]:
    """Brunner et al.'s statements on effective attention, judged on one task's tables: the
    rank argument and its consequences as checks, the paper's observations as findings over
    the examples longer than d_v.

    Statements about sequences of at most d_v tokens are "not testable" when the task has none
    (the tiny default models: d_v = 8), those about longer ones when it has none. On a decoder
    (`decoder`) the rank statements hold row by row (module docstring) and are judged as for an
    encoder; the [SEP] statement is not testable: a decoder has no separator token."""
    long_ = per_head[per_head["length"] > d_v]
    n = long_["example"].nunique()
    negative = long_["negative_share"].mean() if len(long_) else float("nan")
    return [
        *_identifiability_checks(per_head, d_v),
        # A_eff's rows sum to one and are projections of A's: negative entries follow from
        # removing a non-zero null-space component, whatever the model learned
        claim(STAGE, "beyond d_v, effective attention is not a probability distribution",
              f"mean share of negative A_eff entries over sequences of > {d_v} tokens "
              "(holds if > 0)", negative,
              NotTestable(f"no example of more than d_v = {d_v} tokens")
              if long_.empty else negative > 0, kind="check"),
        finding(STAGE, "beyond d_v, r(A, A_eff) falls as sequences get longer",
                f"Pearson r of sequence length and each example's mean r(A, A_eff) over its "
                f"heads, 95 % interval over the {n} examples of > {d_v} tokens (holds below "
                f"-{ONE_POINT}: a falling trend, by one point at least, our choice)",
                _length_trend(long_, d_v), Bar(-ONE_POINT, "below"),
                source("brunner2020", "s3_length")),
        finding(STAGE, "effective attention to [SEP] is lower than raw attention",
                f"each example's mean over layers and heads of effective minus raw attention "
                f"mass on [SEP], 95 % interval over the examples of > {d_v} tokens (holds below "
                f"-{ONE_POINT}: one point lower at least, our choice)",
                _sep_shift(mass, d_v, decoder), Bar(-ONE_POINT, "below"),
                source("brunner2020", "s3_special_tokens")),
    ]
