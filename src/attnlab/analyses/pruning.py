"""Head pruning without re-training (Hao et al. 2021 §4, docs/methods.md), and the paper's
statements as findings judged by the verdict rules (`attnlab.analyses.verdicts`).

* Per-layer effectiveness (paper Fig. 3): rank the heads within each layer by each example's
  own scores and mask k of them in every layer at once, lowest or highest first. Attribution
  ranks by the example's attributions to its gold label, as Hao et al. do (slides presenting
  the paper prune "according to their attribution scores with respect to the golden label";
  the official pruning script passes the gold label too), and the paper's statements are
  judged on that ranking. It tells the mask what the answer is: pruning the heads that speak
  least for the right answer favours it. How much that raises accuracy (the leak) and the
  same statements judged on the ranking by the predicted label, which does not know the
  answer, are this project's findings. Attention (a decoder's at its query,
  `heads.ranking_scores`) and a random order in every layer (draws of a fixed seed, their
  mean) are the baselines.
* Global pruning (Fig. 4): rank all L·H heads by dataset-level importance and mask the lowest
  p %, evaluated on the dev examples that did not score the heads (`heads.evaluation_split`).
* Retention above chance: (acc − chance) / (full − chance), chance the majority-class rate of
  the evaluation examples (`examples.chance`).

Every finding is a statistic of the per-example correctness (0/1) of the examples that evaluate
it, with its bootstrap interval over those examples; two curves on the same examples are
compared by a paired interval.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.analyses import verdicts
from attnlab.analyses.claims import NotTestable, Source, finding, source
from attnlab.analyses.pruning_labels import LABEL_STAGE, LEAK, pruned_half
from attnlab.analyses.verdicts import ONE_POINT, Bar
from attnlab.engine import examples
from attnlab.engine.attribution import attribute, head_maxima

ORDERS = ("lowest", "highest")
# The per-layer rankings, each (ranking, label): the label whose attributions ranked the heads
# (empty where the ranking does not depend on one). The paper's findings are judged on the
# gold label's, this project's on the predicted label's.
GOLD, PREDICTED = ("attribution", "gold"), ("attribution", "predicted")
ATTENTION, RANDOM = ("attention", ""), ("random", "")
RANKINGS = (GOLD, PREDICTED, ATTENTION, RANDOM)

# Our choice (the paper prints no number for Fig. 3, only curves that stay within a few points
# up to half the heads): pruning half the heads of every layer, lowest attribution first, may
# cost at most 5 accuracy points.
LOW_PRUNE_TOLERANCE = 0.05
# Our choice: "competitive with Taylor" is an area under attribution's global-pruning curve
# (mean accuracy over the pruned fraction) at most 5 points below Taylor's.
AUC_MARGIN = 0.05
# Our choice: "keeps most of the accuracy" is more than half of what the model gains over
# chance, with 10 % of the heads kept. The 60 % against 84 % (MNLI) quoted elsewhere is read
# off Fig. 4, not printed in the paper's text, and is no bar we can cite.
RETENTION_BAR = 0.5


@dataclass(frozen=True)
class Curves:
    """Pruning curves: `table`, one row per point, and `correct`, per curve (its key columns'
    values) the per-example correctness (points, N) its findings are judged on (the random
    curves' mean over their draws or seeds)."""

    table: pd.DataFrame
    correct: dict[tuple, np.ndarray]


def per_layer_mask(scores: torch.Tensor, k: int, order: str) -> torch.Tensor:
    """(N, L, H) mask removing, in every layer of every example, the k heads with the lowest
    (order "lowest") or highest scores of that example and layer. Ties: lower head index first."""
    n_heads = scores.shape[-1]
    rank = scores.argsort(dim=-1, stable=True).argsort(dim=-1)  # 0 = lowest score
    keep = rank >= k if order == "lowest" else rank < n_heads - k
    return keep.to(torch.float32)


def global_mask(importance: np.ndarray, percent: float) -> torch.Tensor:
    """(L, H) mask removing the round(p/100 · L·H) least important heads (halves round up;
    ties: lower flat index first)."""
    n_masked = math.floor(percent / 100 * importance.size + 0.5)
    order = np.argsort(importance.ravel(), kind="stable")
    keep = np.ones(importance.size, dtype=np.float32)
    keep[order[:n_masked]] = 0
    return torch.from_numpy(keep.reshape(importance.shape))


def random_scores(shape: tuple[int, ...], *, seed: int, draws: int) -> list[np.ndarray]:
    """`draws` arrays of uniform random scores (a random head order per example and layer),
    the i-th drawn under [seed, i]."""
    return [np.random.default_rng([seed, i]).random(shape) for i in range(draws)]


def label_rankings(
    dumped: np.ndarray, dumped_target: str, predicted: torch.Tensor, labels: torch.Tensor,
    other: Callable[[np.ndarray, torch.Tensor], np.ndarray],
) -> dict[str, np.ndarray]:
    """Each example's per-head attribution maxima to its predicted and to its gold label,
    (N, L, H) by "predicted" and "gold". The dumps hold them for `dumped_target` ("gold" or
    "pred"); where the prediction is right the two labels are one, and only the misclassified
    examples are attributed to the other label, by `other(rows, target)` (the examples' row
    indices and the classes to attribute to)."""
    wrong = (predicted != labels).nonzero().flatten().numpy()
    target = labels if dumped_target == "pred" else predicted
    attributed = dumped.copy()
    if len(wrong):
        attributed[wrong] = other(wrong, target[wrong])
    if dumped_target == "pred":
        return {"predicted": dumped, "gold": attributed}
    return {"predicted": attributed, "gold": dumped}


def _evaluator(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], batch_size: int
) -> Callable[[torch.Tensor], tuple[np.ndarray, np.ndarray]]:
    """Per example of `inputs`: correct (0/1) and the gold label's probability under an
    (N, L, H) head mask, a row per example.

    An example's outcome depends on its own row of the mask only, and the per-layer curves
    share many rows: k = 0 and k = H of every ranking and order, and the gold label's
    attribution ranking is the predicted label's wherever the prediction is right. Each
    (example, row) pair is evaluated once: a mask's pass runs only the examples whose row is
    new, and the others' outcomes are reused.
    """
    done: dict[tuple[int, bytes], tuple[float, float]] = {}

    def evaluate(mask: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        keys = [(i, row.numpy().tobytes()) for i, row in enumerate(mask)]
        new = torch.tensor([i for i, key in enumerate(keys) if key not in done], dtype=torch.long)
        if len(new):
            right, probs = examples.outcomes(model, {k: v[new] for k, v in inputs.items()},
                                             mask[new][None], batch_size)
            for i, c, p in zip(new.tolist(), right[0].tolist(), probs[0].tolist(), strict=True):
                done[keys[i]] = (c, p)
        correct, prob = np.array([done[key] for key in keys]).T
        return correct, prob

    return evaluate


def per_layer_curves(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    rankings: dict[tuple[str, str], list[np.ndarray]],
    batch_size: int = 64,
) -> Curves:
    """Accuracy and mean gold-label probability against k for every ranking and order (a
    random ranking: lowest first, the mean over its draws).

    `rankings` holds, by (ranking, label) of RANKINGS, the (N, L, H) scores of the examples of
    `inputs`, in their order: one array, or one per draw of a random ranking.
    """
    evaluate = _evaluator(model, inputs, batch_size)
    rows, correct = [], {}
    for (ranking, label), draws in rankings.items():
        n_heads = draws[0].shape[-1]
        for order in ORDERS[:1] if (ranking, label) == RANDOM else ORDERS:
            right, prob = np.zeros((n_heads + 1, len(inputs["labels"]))), np.zeros(n_heads + 1)
            for scores in draws:
                for k in range(n_heads + 1):
                    mask = per_layer_mask(torch.from_numpy(scores), k, order)
                    c, p = evaluate(mask)
                    right[k] += c / len(draws)
                    prob[k] += p.mean() / len(draws)
            correct[ranking, label, order] = right
            rows += [{"ranking": ranking, "label": label, "order": order, "k": k,
                      "examples": right.shape[1], "accuracy": right[k].mean(),
                      "gold_prob": prob[k]} for k in range(n_heads + 1)]
    return Curves(pd.DataFrame(rows), correct)


def global_curves(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    importance: pd.DataFrame,
    percents: list[float],
    batch_size: int = 64,
) -> Curves:
    """Accuracy on the examples of `inputs` against the percentage of heads masked, for every
    (method, seed) of an importance table (the random method has one curve per seed; its
    per-example correctness is their mean)."""
    n_layers, n_heads = importance["layer"].max() + 1, importance["head"].max() + 1
    curves = []  # (method, seed, its mask at each percentage)
    for method, runs in importance.groupby("method", sort=False):
        for seed, group in runs.groupby("seed", dropna=False, sort=False):
            scores = np.zeros((n_layers, n_heads))
            scores[group["layer"], group["head"]] = group["importance"]
            curves.append((method, seed, [global_mask(scores, p) for p in percents]))
    # every mask in one call: each batch's passes share its unmasked hidden states
    every_mask = torch.stack([mask for *_, masks in curves for mask in masks])
    right, _ = examples.outcomes(model, inputs, every_mask, batch_size)
    right = right.numpy().reshape(len(curves), len(percents), -1)
    seeds = Counter(method for method, *_ in curves)
    rows, correct = [], {}
    for (method, seed, masks), c in zip(curves, right, strict=True):
        correct[(method,)] = correct.get((method,), 0) + c / seeds[method]
        rows += [{"method": method, "seed": seed, "percent": percent,
                  "heads_masked": int((mask == 0).sum()), "examples": c.shape[1],
                  "accuracy": c[i].mean()}
                 for i, (percent, mask) in enumerate(zip(percents, masks, strict=True))]
    return Curves(pd.DataFrame(rows).astype({"seed": "Int64"}), correct)


def _fig3_findings(curves: Curves, attribution: tuple[str, str], *, stage: str, suffix: str,
                   sources: tuple[Source, Source, Source, Source]) -> list[dict[str, Any]]:
    """The paper's four Fig. 3 statements on one task's per-layer curves, attribution ranked by
    `attribution` (GOLD or PREDICTED), under `stage`, each claim's name followed by `suffix`
    and its source the one of `sources` in its place (low pruning, the random control, high
    pruning, attention)."""
    low_pruning, random_control, high_pruning, attention = sources
    label = f"attribution to the {attribution[1]} label"
    low = curves.correct[(*attribution, "lowest")]
    n_heads = len(low) - 1
    half = pruned_half(n_heads)

    def interior(key: tuple[str, ...]) -> np.ndarray | None:
        """Each example's mean correctness over k = 1..H-1 (None for one head per layer)."""
        return curves.correct[key][1:n_heads].mean(axis=0) if n_heads > 1 else None

    def compare(a: tuple[str, ...], b: tuple[str, ...]) -> verdicts.Interval | NotTestable:
        first, second = interior(a), interior(b)
        if first is None:
            return NotTestable("one head per layer: no k between none and all")
        return verdicts.difference(first, second, paired=True, scale=verdicts.SIGNED_UNIT)

    interval = f"mean accuracy over k=1..{n_heads - 1}, paired 95 % interval over examples"
    ours = f"bar {ONE_POINT}: our choice, a gap of one accuracy point"
    return [
        finding(
            stage, f"pruning low-attribution heads barely hurts{suffix}",
            f"accuracy drop with {half} of {n_heads} heads per layer pruned, lowest {label} "
            f"first, paired 95 % interval over examples (holds below {LOW_PRUNE_TOLERANCE}; "
            f"bar: our choice, the paper prints no number)",
            verdicts.difference(low[0], low[half], paired=True, scale=verdicts.SIGNED_UNIT),
            Bar(LOW_PRUNE_TOLERANCE, "below"), low_pruning),
        finding(
            stage, f"pruning low-attribution heads hurts less than pruning random ones{suffix}",
            f"{interval}, lowest {label} first minus a random order (holds above {ONE_POINT}; "
            f"{ours}; our control, not the paper's)",
            compare((*attribution, "lowest"), (*RANDOM, "lowest")), Bar(ONE_POINT),
            random_control),
        finding(
            stage, f"pruning high-attribution heads hurts more than low-attribution "
            f"ones{suffix}",
            f"{interval}, lowest-first minus highest-first, {label} (holds above {ONE_POINT}; "
            f"{ours})",
            compare((*attribution, "lowest"), (*attribution, "highest")), Bar(ONE_POINT),
            high_pruning),
        finding(
            stage, f"pruning high-attribution heads hurts more than high-attention ones{suffix}",
            f"{interval}, highest attention first minus highest {label} first (holds above "
            f"{ONE_POINT}; {ours})",
            compare((*ATTENTION, "highest"), (*attribution, "highest")), Bar(ONE_POINT),
            attention),
    ]


def per_layer_claims(curves: Curves) -> list[dict[str, Any]]:
    """One task's per-layer findings: the paper's Fig. 3 statements judged on the ranking by
    the gold label, the paper's (stage "per_layer"); then this project's (LABEL_STAGE): that
    ranking's leak, the accuracy it gains over the unpruned model by knowing the answer, and
    the same statements on the ranking by the predicted label, which does not know it."""
    gold = curves.correct[(*GOLD, "lowest")]
    n_heads = len(gold) - 1
    half = pruned_half(n_heads)
    leak = finding(
        LABEL_STAGE, LEAK,
        f"accuracy with {half} of {n_heads} heads per layer pruned, lowest attribution to the "
        f"gold label first (the paper's ranking), minus the unpruned model's, paired 95 % "
        f"interval over examples (holds above {ONE_POINT}: above the unpruned model by our "
        f"gap of one accuracy point)",
        verdicts.difference(gold[half], gold[0], paired=True, scale=verdicts.SIGNED_UNIT),
        Bar(ONE_POINT), source("attnlab", "fig3_gold_leak"))
    paper = (source("hao2021", "fig3_low_pruning"), source("hao2021", "fig3_random_control"),
             source("hao2021", "fig3_high_pruning"), source("hao2021", "fig3_attention"))
    return [*_fig3_findings(curves, GOLD, stage="per_layer", suffix="", sources=paper),
            leak,
            *_fig3_findings(curves, PREDICTED, stage=LABEL_STAGE,
                            suffix=", ranked by the predicted label",
                            sources=(source("attnlab", "fig3_predicted_label"),) * 4)]


def global_claims(curves: Curves, percents: list[float], labels: torch.Tensor
                  ) -> list[dict[str, Any]]:
    """The paper's Fig. 4 statements, judged on one task's global curves (`percents` their
    points, `labels` the gold labels of their examples); claims whose methods were not run are
    left out."""
    methods = {key[0] for key in curves.correct}
    if "attribution" not in methods:
        return []
    fraction = np.asarray(percents, dtype=float) / 100

    def area(method: str) -> np.ndarray:
        """Each example's area under its correctness-vs-fraction-pruned curve."""
        return np.trapezoid(curves.correct[(method,)], fraction, axis=0)

    n = len(labels)
    claims = []
    if "taylor" in methods:
        claims.append(finding(
            "global", "attribution is competitive with taylor",
            f"area under accuracy-vs-fraction-pruned, attribution minus taylor, paired 95 % "
            f"interval over {n} evaluation examples (holds above -{AUC_MARGIN}; bar: our "
            f"choice, the paper prints no number)",
            verdicts.difference(area("attribution"), area("taylor"), paired=True),
            Bar(-AUC_MARGIN), source("hao2021", "fig4_taylor")))
    if "random" in methods:
        claims.append(finding(
            "global", "attribution beats a random head order",
            f"area under accuracy-vs-fraction-pruned, attribution minus random (mean of seeds), "
            f"paired 95 % interval over {n} evaluation examples (holds above {ONE_POINT}; bar: "
            f"our choice, a gap of one accuracy point)",
            verdicts.difference(area("attribution"), area("random"), paired=True),
            Bar(ONE_POINT), source("hao2021", "fig4_random_control")))
    if 0 in percents and 90 in percents:
        floor = examples.chance(labels)
        at = curves.correct[("attribution",)]
        kept, full = at[percents.index(90)], at[percents.index(0)]
        interval: verdicts.Interval | NotTestable = NotTestable(
            f"accuracy with every head ({full.mean():.3g}) is not above chance ({floor:.3g})")
        if full.mean() > floor:
            interval = verdicts.bootstrap(
                np.column_stack([kept, full]),
                lambda s: (s[..., 0].mean(1) - floor) / (s[..., 1].mean(1) - floor))
        claims.append(finding(
            "global", "keeping 10% of heads (by attribution) keeps most of the accuracy",
            f"retention above chance with 90% of heads pruned, (acc - chance) / (full - "
            f"chance), chance {floor:.3g} the majority-class rate, 95 % interval over {n} "
            f"evaluation examples (holds above {RETENTION_BAR}; bar: our choice, 'most' as "
            f"more than half; no number of the paper's text)",
            interval, Bar(RETENTION_BAR),
            source("hao2021", "fig4_few_heads")))
    return claims


def attribution_maxima(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    target: torch.Tensor,
    engine: dict[str, Any],
    batch_size: int = 64,
) -> np.ndarray:
    """Each head's max_ij Attr_h(A^l) of every example, attributed to the class `target` (N,)
    with the engine's options `engine` (`attribution.engine_options`, its batch size
    resolved): (N, L, H). `batch_size` examples per engine call bound the memory its
    attributions (B, L, H, S, S) take."""
    device = next(model.parameters()).device
    inputs, order = examples.by_length(inputs)
    target = target[order]
    out = []
    for rows, batch in examples.batches(inputs, batch_size, device):
        result = attribute(model, batch, target[rows].to(device), **engine)
        out.append(head_maxima(result.attr.double().cpu(), batch["attention_mask"].cpu()))
    return examples.in_input_order(torch.from_numpy(np.concatenate(out)), order).numpy()
