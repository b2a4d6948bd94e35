"""A decoder's induction heads found by several rankings and proven by ablation (rule
induction_heads, docs/decoders.md).

On prompts whose next token only an earlier copy tells (attnlab.data.induction: the planted
task, or the standard protocol of a repeated random sequence), every head is scored four ways:

* prefix-matching (Olsson et al. 2022): its raw attention at the query (the second A) on the
  position after the first A (B's first position, `gt_induction`);
* previous-token: its mean raw attention from each position to the one before it;
* AttAttr (Hao et al. 2021): its mean maximal attribution over the attributed examples (rule
  attribute's dumps: the head importance of rule head_importance);
* attribution patching (Nanda 2023): the first-order estimate of how much mean-ablating it
  raises the next-token loss (`heads.attribution_patching_importance`).

Ground truth is ablation: on dev examples disjoint from those that ranked the heads, each
ranking's top k heads, AttAttr's lowest k and k random heads are mean-ablated together (each
head's output replaced by its mean over the ranking examples' positions,
`Intervention.head_fill`) and the loss of the target token at the query measured: the loss of
a token of the second copy. Each k of the grid gives its own findings (`ablation_findings`).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.analyses import heads
from attnlab.analyses.claims import claims_frame, finding, source
from attnlab.analyses.induction import MECHANISM_SCORE
from attnlab.analyses.verdicts import ONE_POINT, UNIT, Bar, bootstrap, difference
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention

STAGE = "induction_heads"
# the rankings whose top heads are ablated, each a column of the heads table
RANKINGS = ("attattr", "prefix_matching", "attribution_patching")
# a comparison of two ablations holds when the paired interval of the difference of the
# next-token loss lies above 0.01 nats (our choice: the verdict rules' one point, taken on
# the loss's scale)
BEATS = Bar(ONE_POINT)


class HeadsResult(NamedTuple):
    heads: pd.DataFrame  # one row per head: its scores and ranks by each ranking
    ablation: pd.DataFrame  # one row per (ranking, order, k): mean loss and accuracy
    claims: pd.DataFrame
    summary: dict[str, Any]


def attention_scores(model: PreTrainedModel, inputs: dict[str, torch.Tensor],
                     induction: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """Per example and head (examples, 2, layers · heads), from raw attention: its weight at
    the query on the example's `induction` position (prefix matching) and its mean weight from
    each position after the first to the one before (previous token)."""
    device = next(model.parameters()).device
    inputs, order = examples.by_length(inputs)
    induction = induction[order]
    out = []
    with torch.no_grad():
        for rows, batch in examples.batches(inputs, batch_size, device):
            probs, query = heads.attention_and_query(model, batch)
            picks = torch.arange(len(probs), device=device)
            prefix = probs[picks, :, :, query, induction[rows].to(device)]  # (B, L, H)
            steps = probs.diagonal(offset=-1, dim1=-2, dim2=-1)  # (B, L, H, Q-1): i+1 on i
            real = batch["attention_mask"][:, None, None, 1:].to(steps)
            previous = (steps * real).sum(dim=-1) / real.sum(dim=-1)
            out.append(torch.stack([prefix, previous], dim=1).flatten(2).double().cpu())
    return examples.in_input_order(torch.cat(out), order).numpy()


class Ablated(NamedTuple):
    """Per example, with some heads mean-ablated: the next-token loss and correctness at the
    query (the second copy), and the loss of the same token at its first occurrence."""

    loss: np.ndarray
    right: np.ndarray
    first_copy_loss: np.ndarray


class _Batch(NamedTuple):
    inputs: dict[str, torch.Tensor]
    context: models.LayerInputs
    states: list[torch.Tensor]  # the unmasked hidden states entering each layer, and the last
    read: torch.Tensor  # (B, 2): the query and A's first occurrence
    targets: torch.Tensor  # (B, 2): the target, and B's first token (the first copy's)


class Evaluation:
    """Prompts to ablate heads on: in batches, each with the whole model's hidden states
    entering every layer computed once, so that an ablation runs only the layers from its
    first ablated one (the layers below are the whole model's). `induction`: each prompt's B
    position, whose token the first copy predicts from A's first occurrence, where nothing
    before tells it (the target's loss in the first copy)."""

    def __init__(self, model: PreTrainedModel, inputs: dict[str, torch.Tensor], *,
                 induction: torch.Tensor, batch_size: int = 64) -> None:
        self.model = model
        device = next(model.parameters()).device
        inputs, self.order = examples.by_length({**inputs, "induction": induction})
        self.batches = []
        with torch.no_grad():
            for _, batch in examples.batches(inputs, batch_size, device):
                b = batch.pop("induction")
                states = models.hidden_states(model, batch)
                self.batches.append(_Batch(
                    batch, models.layer_inputs(model, states[0], batch["attention_mask"]),
                    states, torch.stack([models.read_positions(model, batch["attention_mask"]),
                                         b - 1], dim=1),
                    torch.stack([batch["labels"], batch["input_ids"].gather(1, b[:, None])[:, 0]],
                                dim=1)))

    def ablated(self, chosen: list[int], fill: dict[int, torch.Tensor]) -> Ablated:
        """Each prompt's losses (`Ablated`) with the heads `chosen` (flat indices layer · heads
        + head) mean-ablated: their outputs replaced by `fill`'s."""
        n_layers, n_heads = models.head_shape(self.model)
        mask = torch.ones(n_layers * n_heads)
        mask[chosen] = 0.0
        start = min(chosen) // n_heads if chosen else n_layers
        out: list[torch.Tensor] = []  # per batch: (3, B)
        with torch.no_grad():
            for batch in self.batches:
                intervention = Intervention(
                    head_mask=mask.view(n_layers, n_heads).to(batch.read.device),
                    head_fill=fill)
                hidden = models.run_layers(self.model, batch.states[start], batch.context,
                                           start, None, intervention)
                logits = models.classify(self.model, hidden, batch.inputs["attention_mask"],
                                         at=batch.read).double()
                losses = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), batch.targets.flatten(), reduction="none").view(-1, 2)
                right = (logits[:, 0].argmax(-1) == batch.targets[:, 0]).double()
                out.append(torch.stack([losses[:, 0], right, losses[:, 1]]).cpu())
        return Ablated(*examples.in_input_order(torch.cat(out, dim=1), self.order,
                                                dim=1).numpy())


def head_table(scores: dict[str, np.ndarray], n_heads: int) -> pd.DataFrame:
    """One row per head of `scores` (each (layers · heads,), `n_heads` a layer): every score,
    its rank by each ranking (1: top) and whether it is an induction or a previous-token head
    (its mean prefix-matching, previous-token score at least MECHANISM_SCORE)."""
    table = pd.DataFrame({"layer": np.arange(len(scores["attattr"])) // n_heads,
                          "head": np.arange(len(scores["attattr"])) % n_heads, **scores})
    for name in RANKINGS:
        table[f"rank_{name}"] = table[name].rank(ascending=False, method="first").astype(int)
    table["induction_head"] = table["prefix_matching"] >= MECHANISM_SCORE
    table["previous_token_head"] = table["previous_token"] >= MECHANISM_SCORE
    return table


def top(scores: np.ndarray, k: int) -> list[int]:
    """The flat indices of the `k` highest `scores` (ties: the lower index first)."""
    return np.argsort(-scores, kind="stable")[:k].tolist()


def overlap_share(attattr: np.ndarray, prefix_top: list[int], k: int) -> np.ndarray:
    """On each resample (resamples, examples, heads) of the attributed examples' maximal
    attributions: the share of AttAttr's top `k` heads (by their mean) in `prefix_top`."""
    ranked = np.argsort(-attattr.mean(axis=1), axis=1, kind="stable")[:, :k]
    return np.isin(ranked, prefix_top).mean(axis=1)


def head_analysis(
    model: PreTrainedModel,
    ranking: dict[str, torch.Tensor],
    evaluation: dict[str, torch.Tensor],
    *,
    induction: torch.Tensor,
    evaluation_induction: torch.Tensor,
    attattr: np.ndarray,
    ks: list[int],
    draws: int,
    seed: int,
    batch_size: int = 64,
) -> HeadsResult:
    """The heads' scores on the `ranking` examples (prompts as `models.logits` takes them,
    `labels` the targets; `induction` their B positions), AttAttr's from `attattr` (the
    attributed examples' (N, L, H) maximal attributions), and each ranking's top k, AttAttr's
    lowest k and `draws` random k heads mean-ablated on the `evaluation` examples (their B
    positions `evaluation_induction`), k in `ks`: the loss of the second copy's target and of
    the same token in the first copy (`Evaluation`)."""
    n_layers, n_heads = models.head_shape(model)
    started = time.process_time()
    raw = attention_scores(model, ranking, induction, batch_size)
    attention_seconds = time.process_time() - started
    started = time.process_time()
    patching = heads.attribution_patching_importance(model, ranking, batch_size).ravel()
    patching_seconds = time.process_time() - started
    per_attributed = attattr.reshape(len(attattr), -1)
    scores = {"prefix_matching": raw[:, 0].mean(axis=0), "previous_token": raw[:, 1].mean(axis=0),
              "attattr": per_attributed.mean(axis=0), "attribution_patching": patching}
    fill = heads.mean_head_outputs(model, ranking, batch_size)
    prompts = Evaluation(model, evaluation, induction=evaluation_induction,
                         batch_size=batch_size)
    full = prompts.ablated([], fill)
    rng = np.random.default_rng(seed)
    # by (ranking, order, k); k = 0: the whole model
    losses: dict[tuple[str, str, int], Ablated] = {("none", "", 0): full}
    for k in ks:
        sets = {**{(name, "top"): [top(scores[name], k)] for name in RANKINGS},
                ("attattr", "lowest"): [top(-scores["attattr"], k)],
                ("random", ""): [rng.choice(n_layers * n_heads, k, replace=False).tolist()
                                 for _ in range(draws)]}
        for (name, order), chosen in sets.items():
            runs = [prompts.ablated(heads_, fill) for heads_ in chosen]
            losses[name, order, k] = Ablated(*(np.mean(values, axis=0)
                                               for values in zip(*runs, strict=True)))
    ablation = pd.DataFrame([
        {"ranking": name, "order": order, "k": k, "loss": out.loss.mean(),
         "accuracy": out.right.mean(), "first_copy_loss": out.first_copy_loss.mean()}
        for (name, order, k), out in losses.items()]).assign(examples=len(full.loss))
    claims = ablation_findings(losses, per_attributed, scores["prefix_matching"], ks)
    summary = {"ranking_examples": len(raw), "attributed_examples": len(attattr),
               "evaluation_examples": len(full.loss), "loss": float(full.loss.mean()),
               "accuracy": float(full.right.mean()),
               "first_copy_loss": float(full.first_copy_loss.mean()),
               "attention_cpu_seconds_per_prompt": attention_seconds / len(raw),
               "attribution_patching_cpu_seconds_per_prompt": patching_seconds / len(raw)}
    return HeadsResult(head_table(scores, n_heads), ablation, claims_frame(claims), summary)


def ablation_findings(losses: dict[tuple[str, str, int], Ablated], attattr: np.ndarray,
                      prefix: np.ndarray, ks: list[int]) -> list[dict[str, Any]]:
    """For each k of `ks`: AttAttr's top k against prefix matching's top k (their overlap, over
    resamples of the `attattr` (N, heads) examples, against chance: a random k heads' expected
    share k / heads); the mean-ablation `losses` (per evaluation example, by (ranking, order,
    k), the whole model's at ("none", "", 0)) of AttAttr's top k against k random, its lowest
    k, prefix matching's and attribution patching's top k (paired over the evaluation
    examples); and for AttAttr's and prefix matching's top k, the rise of the second copy's
    loss against the rise of the first copy's (paired): a head every token needs raises both,
    an induction head the second copy's."""
    olsson = "olsson2022"
    full = losses["none", "", 0]
    out = []
    for k in ks:
        mine = losses["attattr", "top", k].loss
        out.append(finding(
            STAGE, f"AttAttr's top {k} heads are among the {k} of highest prefix-matching "
            "score beyond chance", f"share of AttAttr's top {k} in prefix matching's top {k} "
            f"(bar: chance, {k}/{attattr.shape[1]})",
            bootstrap(attattr, lambda sample, k=k: overlap_share(
                sample, top(prefix, k), k), scale=UNIT), Bar(k / attattr.shape[1]),
            source(olsson, "prefix_matching")))
        against = {"k random heads": ("random", "", olsson, "ablation"),
                   f"AttAttr's lowest {k}": ("attattr", "lowest", olsson, "ablation"),
                   f"prefix matching's top {k}": ("prefix_matching", "top", "hao2021",
                                                  "attention_differs"),
                   f"attribution patching's top {k}": ("attribution_patching", "top",
                                                       "nanda2023", "linear_approximation")}
        for name, (ranking, order, paper, key) in against.items():
            out.append(finding(
                STAGE, f"Mean-ablating AttAttr's top {k} heads raises the next-token loss on "
                f"the second copy more than ablating {name}",
                f"loss, AttAttr's top {k} - {name}, paired (nats)",
                difference(mine, losses[ranking, order, k].loss, paired=True), BEATS,
                source(paper, key)))
        for ranking, name in (("attattr", "AttAttr"), ("prefix_matching", "prefix matching")):
            ablation = losses[ranking, "top", k]
            out.append(finding(
                STAGE, f"Mean-ablating {name}'s top {k} heads raises the second copy's loss "
                "more than the first copy's (the same token)",
                "rise of the loss, second copy - first copy, paired (nats)",
                difference(ablation.loss - full.loss,
                           ablation.first_copy_loss - full.first_copy_loss, paired=True),
                BEATS, source(olsson, "in_context_loss")))
    return out
