"""Hidden token attribution (Brunner et al. 2020 §5, docs/methods.md): how much each input token
contributes to each hidden token.

The contribution of input token i to hidden token j at layer l is

    c^l_{i→j} = ‖∂e^l_j / ∂x_i‖_F / Σ_k ‖∂e^l_j / ∂x_k‖_F

with x = e^0 the input embeddings and the true Frobenius norm of the d × d Jacobian block —
not the gradient of the summed components of e^l_j, which lets components cancel.

Both estimators run in forward mode: one Jacobian–vector product with a tangent u on input
token i gives (∂e^l_j/∂x_i) u for every hidden token j and every layer l in one pass through
the stack, so no layer is differentiated twice (reverse mode needs a separate backward pass
per layer, L(L+1)/2 layer passes for L layers instead of L). The products run in batches of
tangents (`torch.func.vmap`) over one forward pass of the primal.

Exact: u runs over the d unit vectors of each input token, n·d products in all, and the sum
of the squared outputs is the squared Frobenius norm of every block. Probes, for long inputs:
for a random Rademacher vector u (E[u uᵀ] = I), E‖(∂e^l_j/∂x_i) u‖² = ‖∂e^l_j/∂x_i‖_F², so the
mean over P probes per input token (n·P products) is an unbiased estimate of the squared norm,
returned with its standard error s/√P (s the probes' standard deviation). Its relative standard
error is at most √(2/P) for any block (approached by a rank-one block), and √(2/(P·r)) for a
block with r equal non-zero singular values; the norms, square roots, have about half the
relative error of their squares.

Layers are numbered as hidden states: layer l is the output of the l-th transformer block
(l = 1..L; layer 0, the embeddings, would be each token alone).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformers import PreTrainedModel

from attnlab.analyses import verdicts
from attnlab.analyses.claims import NotTestable, finding, source
from attnlab.analyses.verdicts import ONE_POINT, Bar
from attnlab.engine import models

STAGE = "token_mixing"
# "In the last layers, 30% of the tokens are not the highest contributor to their hidden
# embedding" (Lee 2022's slides on Brunner et al. §5): the printed share, and the band that its
# one significant digit allows (a share that rounds to 30 % lies within 5 points of it).
PRINTED_NOT_SELF = 0.30
ROUNDING = 0.05
# Tangents per batched pass: the schema's default for identifiability.token_mixing.vjp_batch,
# the fastest on one CPU thread with MiniLM (benchmarks/token_mixing.py)
TANGENT_BATCH = 64


def _tangent_norms(
    model: PreTrainedModel, x: torch.Tensor, context: models.LayerInputs
) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function from a batch of tangents (B, 1, n, d) at the input embeddings x (1, n, d) to
    the squared norms ‖(∂e^l_j/∂x) u‖² of their images, (B, L, n) indexed [b, l − 1, j]."""
    layers = models.num_layers(model)

    def states(hidden: torch.Tensor) -> torch.Tensor:  # x -> (L, n, d): e^1..e^L
        out = []
        for layer in range(layers):
            hidden = models.run_layers(model, hidden, context, layer, layer + 1)
            out.append(hidden[0])
        return torch.stack(out)

    def norms(tangent: torch.Tensor) -> torch.Tensor:
        return torch.func.jvp(states, (x,), (tangent,))[1].double().pow(2).sum(dim=-1)

    return torch.func.vmap(norms)


def squared_jacobian_norms(
    model: PreTrainedModel,
    example: dict[str, torch.Tensor],
    probes: int | None = None,
    tangent_batch: int = TANGENT_BATCH,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """‖∂e^l_j/∂x_i‖_F² for l = 1..L as an (L, n, n) tensor indexed [l − 1, j, i], of one
    example given without padding (a batch of one).

    probes=None: exact (n·d Jacobian–vector products). probes=P: the unbiased Rademacher
    estimate from P probes per input token, returned with its standard error (else None).
    `tangent_batch` products share one batched forward pass."""
    with torch.no_grad():
        x = models.embed(model, example)
        context = models.layer_inputs(model, x, example["attention_mask"])
    n, d = x.shape[1:]
    per_token = d if probes is None else probes  # products per input token i
    token_of_row = torch.arange(n).repeat_interleave(per_token)
    generator = torch.Generator().manual_seed(seed)
    image_norms = _tangent_norms(model, x, context)
    layers = models.num_layers(model)
    total = torch.zeros(layers, n, n, dtype=torch.float64)
    total_sq = torch.zeros(layers, n, n, dtype=torch.float64)
    with torch.no_grad():  # forward-mode derivatives need no autograd graph
        for rows in torch.arange(n * per_token).split(tangent_batch):
            tangents = torch.zeros(len(rows), 1, n, d, dtype=x.dtype)
            if probes is None:  # one-hot at (i, b)
                tangents[torch.arange(len(rows)), 0, token_of_row[rows], rows % d] = 1
            else:
                signs = torch.randint(0, 2, (len(rows), d), generator=generator) * 2 - 1
                tangents[torch.arange(len(rows)), 0, token_of_row[rows]] = signs.to(x.dtype)
            norms = image_norms(tangents.to(x.device)).cpu().permute(1, 2, 0)  # (L, n_j, rows)
            total.index_add_(2, token_of_row[rows], norms)
            total_sq.index_add_(2, token_of_row[rows], norms.pow(2))
    if probes is None:
        return total, None
    mean = total / probes
    variance = (total_sq / probes - mean.pow(2)).clamp_min(0) * probes / max(probes - 1, 1)
    return mean, (variance / probes).sqrt()


def contributions(squared_norms: torch.Tensor) -> torch.Tensor:
    """c_{i→j} = ‖J_ji‖_F / Σ_k ‖J_jk‖_F, indexed [..., j, i]."""
    norms = squared_norms.sqrt()
    return norms / norms.sum(dim=-1, keepdim=True)


def _by_distance(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each hidden token's mean contribution from the input tokens next to it (|i − j| = 1)
    and from those two or more away, (L, n) each from c (L, n, n) [l − 1, j, i]; NaN where a
    token has none (a one-token example; no distant token in one of two or three tokens)."""
    n = c.shape[-1]
    distance = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs()
    near, far = (distance == 1).double(), (distance >= 2).double()
    c = c.double()
    return (c * near).sum(-1) / near.sum(-1), (c * far).sum(-1) / far.sum(-1)


def analyse_examples(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    exact_max_tokens: int,
    probes: int,
    tangent_batch: int = TANGENT_BATCH,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Token mixing of every example: exact up to `exact_max_tokens` real tokens, estimated
    from `probes` probes beyond.

    Returns the per-token table (example, length, layer, token, self_contribution,
    top_contributor, top_is_self, neighbour_contribution, distant_contribution, estimator) and
    the offset table (layer, offset = i − j, mean_contribution, pairs)."""
    device = next(model.parameters()).device
    token_rows = []
    offset_sum: dict[tuple[int, int], float] = {}
    offset_count: dict[tuple[int, int], int] = {}
    for index in tqdm(range(len(inputs["input_ids"])), desc="token mixing", mininterval=5):
        real = inputs["attention_mask"][index].bool()
        example = {k: v[index][real][None].to(device) for k, v in inputs.items()
                   if v.dim() == 2}
        n = int(real.sum())
        exact = n <= exact_max_tokens
        seed_i = int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
        squared, _ = squared_jacobian_norms(model, example, None if exact else probes,
                                            tangent_batch, seed_i)
        c = contributions(squared)  # (L, n, n) [layer − 1, j, i]
        layers, tokens = np.indices(c.shape[:2])
        top = c.argmax(dim=-1)
        near, far = _by_distance(c)
        token_rows.append(pd.DataFrame({
            "example": index, "length": n, "layer": layers.ravel() + 1,
            "token": tokens.ravel(), "self_contribution": c.diagonal(dim1=1, dim2=2).ravel(),
            "top_contributor": top.ravel(), "top_is_self": (top == torch.arange(n)).ravel(),
            "neighbour_contribution": near.ravel(), "distant_contribution": far.ravel(),
            "estimator": "exact" if exact else f"probes={probes}",
        }))
        shifted = (torch.arange(n)[None, :] - torch.arange(n)[:, None] + n - 1).ravel()
        counts = torch.bincount(shifted, minlength=2 * n - 1)  # pairs at each offset i − j
        for layer in range(c.shape[0]):
            sums = torch.bincount(shifted, weights=c[layer].ravel().double(), minlength=2 * n - 1)
            for offset in range(-(n - 1), n):
                key = (layer + 1, offset)
                offset_sum[key] = offset_sum.get(key, 0.0) + float(sums[offset + n - 1])
                offset_count[key] = offset_count.get(key, 0) + int(counts[offset + n - 1])
    offsets = pd.DataFrame([{"layer": layer, "offset": offset,
                             "mean_contribution": offset_sum[layer, offset] / count,
                             "pairs": count}
                            for (layer, offset), count in sorted(offset_count.items())])
    return pd.concat(token_rows, ignore_index=True), offsets


def not_self_shares(tokens: pd.DataFrame) -> pd.Series:
    """Each example's share of tokens at the last layer of the per-token table whose largest
    contributor is not their own input (Brunner et al.'s "30 %" is of this share)."""
    at_last = tokens[tokens["layer"] == tokens["layer"].max()]
    return 1 - at_last.groupby("example")["top_is_self"].mean()


def claims(tokens: pd.DataFrame) -> list[dict[str, Any]]:
    """Brunner et al.'s statements on token mixing, judged on one task's per-token table, each
    with its interval over the examples (the tokens of one example share its context, so the
    example is the unit)."""
    last = int(tokens["layer"].max())
    at_last = tokens[tokens["layer"] == last]
    not_self = not_self_shares(tokens)
    median_self = tokens.groupby(["example", "layer"])["self_contribution"].median().unstack()
    fall = median_self[1] - median_self[last]
    local = (at_last["neighbour_contribution"] - at_last["distant_contribution"]).groupby(
        at_last["example"]).mean().dropna()
    over = f"95 % interval over {len(not_self)} examples"
    return [
        finding(STAGE, f"in the last layer about {PRINTED_NOT_SELF:.0%} of the tokens have "
                "another input token as their largest contributor",
                f"distance of the mean over examples of each example's share of tokens at layer "
                f"{last} whose top contributor is not their own input from the printed "
                f"{PRINTED_NOT_SELF:.0%}, {over} (holds below {ROUNDING}: the bar is printed, the "
                "band its rounding)",
                verdicts.bootstrap(not_self.to_numpy(), _distance_from_printed,
                                   scale=(0.0, max(PRINTED_NOT_SELF, 1 - PRINTED_NOT_SELF))),
                Bar(ROUNDING, "below"), source("brunner2020", "mixing")),
        finding(STAGE, "a token's own input contributes less with depth",
                f"each example's median self-contribution at layer 1 minus at layer {last}, "
                f"{over} (holds above {ONE_POINT}: one point, our choice)",
                NotTestable("the model has fewer than two layers") if last < 2
                else verdicts.bootstrap(fall.to_numpy(), scale=verdicts.SIGNED_UNIT),
                Bar(ONE_POINT), source("brunner2020", "self_contribution")),
        finding(STAGE, "neighbouring tokens contribute more than distant ones",
                f"each example's mean over its tokens at layer {last} of the mean contribution "
                f"of the inputs at |offset| = 1 minus those at |offset| >= 2, 95 % interval "
                f"over the {len(local)} examples with both (holds above {ONE_POINT}: one point, "
                "our choice)",
                NotTestable("no token has both a neighbour and a token two or more away")
                if local.empty
                else verdicts.bootstrap(local.to_numpy(), scale=verdicts.SIGNED_UNIT),
                Bar(ONE_POINT), source("brunner2020", "locality")),
    ]


def _distance_from_printed(sample: np.ndarray) -> np.ndarray:
    """|mean − PRINTED_NOT_SELF| of each resample (resamples, examples): below ROUNDING
    exactly when the mean share rounds to the printed share."""
    return np.abs(sample.mean(axis=1) - PRINTED_NOT_SELF)
