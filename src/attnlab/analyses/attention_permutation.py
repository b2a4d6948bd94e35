"""Attention permutation (Jain & Wallace 2019; Drozdyuk et al.; docs/methods.md): does the model's
output depend on which token each attention weight sits on?

For one layer at a time, and for all layers together, every head's weights are shuffled over
the key positions of every query row — special tokens ([CLS], [SEP], ...) keep their weights,
padding stays out — and the model is run with the shuffled weights (for "all", each layer's
own weights as computed in the shuffled pass are shuffled). This is repeated for P seeded
permutations. Per example we record the median over permutations of the total-variation
distance (TVD) between the original and the permuted output distributions, and the share of
permutations that leave the prediction correct.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.analyses import verdicts
from attnlab.analyses.claims import NotTestable, finding, source
from attnlab.analyses.divergences import total_variation
from attnlab.analyses.verdicts import ONE_POINT, Bar
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention

STAGE = "attention_permutation"
ALL_LAYERS = "all"
# Drozdyuk et al.'s poster: "Permuting k drops the accuracy of the model by only 6 percent", a
# statement that the drop is small: the bar, the drop must lie below it.
POSTER_FIRST_LAYER_DROP = 0.06
# "Barely matters": at most one accuracy point (verdicts.ONE_POINT), the noise of one model on a
# few hundred examples.
NEGLIGIBLE_DROP = ONE_POINT


def permutation_indices(
    permutable: torch.Tensor, n_heads: int, generator: torch.Generator
) -> torch.Tensor:
    """(B, H, K, K) key indices: for every batch row, head and query row, a uniformly random
    permutation of the permutable key positions (B, K); other positions map to themselves."""
    b, k = permutable.shape
    movable = permutable[:, None, None, :].expand(b, n_heads, k, k)
    positions = torch.arange(k, dtype=torch.float64).expand(b, n_heads, k, k)
    # Sorting puts the movable positions first (in order, resp. in random order) and the fixed
    # ones after them, in the same order in both: slot m of `ordered` receives `shuffled`'s.
    ordered = torch.where(movable, positions, torch.inf).argsort(dim=-1, stable=True)
    draws = torch.rand(b, n_heads, k, k, generator=generator, dtype=torch.float64)
    shuffled = torch.where(movable, draws, torch.inf).argsort(dim=-1, stable=True)
    return torch.empty_like(ordered).scatter_(-1, ordered, shuffled)


def _padded(index: torch.Tensor, width: int) -> torch.Tensor:
    """Key indices (1, H, n, n) of an example's own tokens, extended by the identity to the
    batch's width (padding is never moved)."""
    n = index.shape[-1]
    full = torch.arange(width).repeat(1, index.shape[1], width, 1)
    full[..., :n, :n] = index
    return full


def _generator(*key: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(np.random.SeedSequence(key).generate_state(1)[0]))


def permuted_probabilities(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    inputs: dict[str, torch.Tensor],
    layers: list[int],
    permutations: int,
    seed: int,
    batch_size: int = 64,
) -> torch.Tensor:
    """Output distributions (P, N, C) with the attention of `layers` permuted, one seeded draw
    per permutation, example and layer."""
    device = next(model.parameters()).device
    n_heads = model.config.num_attention_heads
    inputs, order = examples.by_length(inputs)
    out = []
    with torch.no_grad():
        for p in range(permutations):
            probs = []
            for rows, batch in examples.batches(inputs, batch_size, device):
                permutable = (batch["attention_mask"].bool()
                              & ~examples.special_tokens_mask(batch["input_ids"], tokenizer)).cpu()
                permute = {layer: [] for layer in layers}
                for offset, example in enumerate(order[rows].tolist()):
                    # drawn per example over its own tokens: the same whatever its batch
                    generator = _generator(seed, p, example, *layers)
                    n = int(batch["attention_mask"][offset].sum())
                    for layer in layers:
                        own = permutation_indices(permutable[offset:offset + 1, :n], n_heads,
                                                  generator)
                        permute[layer].append(_padded(own, permutable.shape[1]))
                permute = {layer: torch.cat(parts) for layer, parts in permute.items()}
                logits = models.logits(model, batch, Intervention(permute=permute))
                probs.append(torch.softmax(logits.double(), dim=-1).cpu())
            out.append(torch.cat(probs))
    return examples.in_input_order(torch.stack(out), order, dim=1)


def permutation_table(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    inputs: dict[str, torch.Tensor],
    permutations: int,
    seed: int,
    batch_size: int = 64,
) -> pd.DataFrame:
    """Per permuted layer ("0", "1", ..., "all") and example: tvd_median (over permutations),
    correct_share (share of permutations with a correct prediction), original_correct."""
    original = torch.softmax(examples.predict(model, inputs, batch_size=batch_size).double(),
                             dim=-1)
    labels = inputs["labels"]
    n_layers = models.num_layers(model)
    settings = [(str(layer), [layer]) for layer in range(n_layers)]
    settings.append((ALL_LAYERS, list(range(n_layers))))
    frames = []
    for name, layers in tqdm(settings, desc="attention permutation", mininterval=5):
        permuted = permuted_probabilities(model, tokenizer, inputs, layers, permutations, seed,
                                          batch_size)
        tvd = total_variation(original[None], permuted)  # (P, N)
        frames.append(pd.DataFrame({
            "permuted": name,
            "example": np.arange(len(labels)),
            "tvd_median": tvd.median(dim=0).values.numpy(),
            "correct_share": (permuted.argmax(-1) == labels).double().mean(dim=0).numpy(),
            "original_correct": (original.argmax(-1) == labels).numpy(),
        }))
    return pd.concat(frames, ignore_index=True)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per permuted layer: accuracy_change (mean permuted accuracy minus the original one) and
    tvd_median (median over examples of each example's median TVD)."""
    grouped = table.groupby("permuted", sort=False)
    return pd.DataFrame({
        "accuracy_change": grouped["correct_share"].mean() - grouped["original_correct"].mean(),
        "tvd_median": grouped["tvd_median"].median(),
    }).reset_index()


def claims(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Drozdyuk et al.'s statements on attention permutation, judged on one task's table, with
    intervals over the examples: each example's accuracy drop is its original correctness
    minus its share of correct permuted predictions."""
    single = table[table["permuted"] != ALL_LAYERS]
    drops = single.assign(drop=single["original_correct"].astype(float)
                          - single["correct_share"]).pivot(index="example", columns="permuted",
                                                           values="drop")
    others = drops.drop(columns="0")
    n = len(drops)
    return [
        finding(STAGE, "permuting the first layer's attention drops accuracy by only about "
                f"{POSTER_FIRST_LAYER_DROP:.0%}",
                f"accuracy drop with layer 0 permuted, 95 % interval over {n} examples (holds "
                f"below {POSTER_FIRST_LAYER_DROP}: the poster's 'only 6 percent')",
                verdicts.bootstrap(drops["0"].to_numpy(), scale=verdicts.SIGNED_UNIT),
                Bar(POSTER_FIRST_LAYER_DROP, "below"),
                source("drozdyuk", "first_layer")),
        finding(STAGE, "permuting any other single layer's attention barely changes accuracy",
                f"largest accuracy drop over layers >= 1, each permuted alone, 95 % interval "
                f"over {n} examples (holds below {NEGLIGIBLE_DROP}: our choice, one accuracy "
                "point)",
                NotTestable("the model has one layer") if others.empty
                else verdicts.bootstrap(others.to_numpy(), _largest_mean,
                                        scale=verdicts.SIGNED_UNIT),
                Bar(NEGLIGIBLE_DROP, "below"),
                source("drozdyuk", "other_layers")),
    ]


def _largest_mean(sample: np.ndarray) -> np.ndarray:
    """The largest column mean of each resample (resamples, examples, layers)."""
    return sample.mean(axis=1).max(axis=1)
