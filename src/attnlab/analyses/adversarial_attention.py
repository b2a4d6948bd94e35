"""Adversarial keys (Drozdyuk et al.) and adversarial attention (Jain & Wallace 2019; see
docs/methods.md): can very different attention give the same prediction?

Adversarial keys. One MLP (hidden layer of cfg["hidden"] units, ReLU), shared by all layers,
maps each layer's keys (all heads side by side, d_model per token) to adversarial keys in the
forward pass. It is trained on training sentences with

    loss = α · CE(original prediction, prediction with adversarial keys) − (1 − α) · min(D, cap)

D = ‖K − K_adv‖_F / ‖K‖_F over the layers' real tokens (Drozdyuk et al.'s distance term, made
relative and capped so that it cannot grow without bound and drown the first term). On dev
examples we report whether the prediction is unchanged, D per layer, and the Jensen–Shannon
divergence (JSD) between the original attention and the attention the adversarial keys give.

Adversarial attention. Per example and for one layer at a time, the layer's attention
distributions (every head and query row) are optimised with Adam to maximise their mean JSD
from the original ones, with a penalty λ·max(0, TVD − ε) on the total-variation distance of
the output distribution. The result is the iterate with the largest JSD among those whose TVD
was at most ε, checked once more at the end; an example for which none was falls back to its
original attention (JSD 0), so the bound holds on every example.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm import tqdm
from transformers import PreTrainedModel

from attnlab.analyses import verdicts
from attnlab.analyses.claims import claim, finding, source
from attnlab.analyses.divergences import jensen_shannon, total_variation
from attnlab.analyses.verdicts import Bar
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention

log = logging.getLogger(__name__)

# "Same predictions": at most one dev prediction in twenty changes.
SAME_PREDICTIONS = 0.95
# "Very different keys": moved by at least half their own norm (a check: the loss rewards the
# distance up to explanation.adversarial_keys.distance_cap).
FAR_KEYS = 0.5
# "Very different attention": a mean JSD of at least 0.1 nats, a seventh of the largest
# possible (ln 2, disjoint distributions).
LARGE_JSD = 0.1
# A JSD's range in nats: from equal distributions to disjoint ones.
JSD_SCALE = (0.0, math.log(2))


class KeyAdversary(nn.Module):
    """Drozdyuk et al.'s MLP from keys to adversarial keys, applied to every layer's keys."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d_model, hidden), nn.ReLU(), nn.Linear(hidden, d_model))

    def forward(self, layer: int, key: torch.Tensor) -> torch.Tensor:
        """Keys (B, H, K, d) -> adversarial keys of the same shape (the MLP sees all heads)."""
        b, h, k, d = key.shape
        mapped = self.mlp(key.transpose(1, 2).reshape(b, k, h * d))
        return mapped.view(b, k, h, d).transpose(1, 2)


def key_distances(
    keys: dict[int, tuple[torch.Tensor, torch.Tensor]], real: torch.Tensor
) -> torch.Tensor:
    """(B, L) ‖K − K_adv‖_F / ‖K‖_F of each layer, over the real tokens (B, K) of each example."""
    out = []
    for layer in sorted(keys):
        original, mapped = keys[layer]
        weight = real[:, None, :, None].to(original)
        change = ((mapped - original).pow(2) * weight).sum(dim=(1, 2, 3))
        out.append((change / (original.pow(2) * weight).sum(dim=(1, 2, 3))).sqrt())
    return torch.stack(out, dim=1)


def attention_jsd(
    original: torch.Tensor, other: torch.Tensor, real: torch.Tensor
) -> torch.Tensor:
    """(B,) JSD of two attention tensors (B, H, Q, K), averaged over heads and real query rows."""
    jsd = jensen_shannon(original.double(), other.double())  # (B, H, Q)
    rows = real[:, None, :].to(jsd)
    return (jsd * rows).sum(dim=(1, 2)) / (rows.sum(dim=(1, 2)) * jsd.shape[1])


def _shuffled(inputs: dict[str, torch.Tensor], generator: torch.Generator) -> dict:
    order = torch.randperm(len(inputs["input_ids"]), generator=generator)
    return {k: v[order] for k, v in inputs.items()}


def train_key_adversary(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    cfg: Mapping[str, Any],
    batch_size: int,
    seed: int,
) -> KeyAdversary:
    """Fit the key adversary on `inputs` (the model stays frozen); seeded. `cfg` is
    config["explanation"]["adversarial_keys"]."""
    device = next(model.parameters()).device
    model.requires_grad_(False)
    with torch.random.fork_rng():  # the MLP's initial weights, without touching global state
        torch.manual_seed(seed)
        adversary = KeyAdversary(model.config.hidden_size, cfg["hidden"]).to(device)
    optimizer = torch.optim.Adam(adversary.parameters(), lr=cfg["learning_rate"])
    alpha, cap = cfg["alpha"], cfg["distance_cap"]
    generator = torch.Generator().manual_seed(seed)
    epochs = tqdm(range(cfg["epochs"]), desc="adversarial keys", mininterval=5)
    for epoch in epochs:
        # every step takes batch_size sentences, whatever their padding
        for _, batch in examples.batches(_shuffled(inputs, generator), batch_size, device,
                                         padding=1.0):
            with torch.no_grad():
                predicted = models.logits(model, batch).argmax(dim=-1)
            intervention = Intervention(key_map=adversary)
            logits = models.logits(model, batch, intervention)
            distance = key_distances(intervention.keys, batch["attention_mask"].bool())
            # the distance of all layers together: root of the mean squared per-layer distance
            distance = distance.pow(2).mean(dim=1).sqrt()
            loss = (alpha * nn.functional.cross_entropy(logits, predicted)
                    - (1 - alpha) * distance.clamp(max=cap).mean())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        log.info("adversarial keys, epoch %d: last batch loss %.4f, distance %.3f",
                 epoch + 1, loss.item(), distance.mean().item())
    return adversary.eval()


def evaluate_key_adversary(
    model: PreTrainedModel,
    adversary: KeyAdversary,
    inputs: dict[str, torch.Tensor],
    batch_size: int = 64,
) -> pd.DataFrame:
    """Per example and layer: same_prediction (with adversarial keys in every layer),
    key_distance (relative) and jsd (mean over heads and real query rows)."""
    device = next(model.parameters()).device
    frames = []
    inputs, order = examples.by_length(inputs)
    with torch.no_grad():
        for rows, batch in examples.batches(inputs, batch_size, device):
            real = batch["attention_mask"].bool()
            plain, attacked = Intervention(capture=True), Intervention(capture=True,
                                                                        key_map=adversary)
            same = (models.logits(model, batch, plain).argmax(-1)
                    == models.logits(model, batch, attacked).argmax(-1))
            distance = key_distances(attacked.keys, real)
            for layer in sorted(plain.probs):
                frames.append(pd.DataFrame({
                    "example": order[rows].numpy(), "layer": layer,
                    "same_prediction": same.cpu().numpy(),
                    "key_distance": distance[:, layer].cpu().numpy(),
                    "jsd": attention_jsd(plain.probs[layer], attacked.probs[layer],
                                         real).cpu().numpy(),
                }))
    return pd.concat(frames, ignore_index=True).sort_values(["example", "layer"],
                                                            ignore_index=True)


def _outputs(model: PreTrainedModel, batch: dict,
             layer: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function from layer `layer`'s attention (B, H, S, S) to the output distributions of
    `batch` (B, C) with that attention in place of the layer's own. Nothing below the layer
    depends on it: where the family can be run from a hidden state (`Family.split`), the
    hidden states entering the layer are computed once, and every call (a search step's
    forward and backward pass) runs layers `layer`..L-1 only."""
    def whole(attention: torch.Tensor) -> torch.Tensor:
        logits = models.logits(model, batch, Intervention(replace={layer: attention}))
        return torch.softmax(logits.double(), dim=-1)

    if not models.family_of(model).split:
        return whole
    with torch.no_grad():
        hidden = models.embed(model, batch)
        context = models.layer_inputs(model, hidden, batch["attention_mask"])
        hidden = models.run_layers(model, hidden, context, 0, layer)

    def from_layer(attention: torch.Tensor) -> torch.Tensor:
        out = models.run_layers(model, hidden, context, layer, None,
                                Intervention(replace={layer: attention}))
        logits = models.classify(model, out, batch["attention_mask"])
        return torch.softmax(logits.double(), dim=-1)

    return from_layer


def search_attention(
    model: PreTrainedModel,
    batch: dict[str, torch.Tensor],
    layer: int,
    cfg: Mapping[str, Any],
    noise: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Jain & Wallace's search for one batch, starting from the original log-attention plus
    cfg["init_noise"] · `noise` (B, H, S, S): (the layer's original attention, the adversarial
    attention kept, the number of steps whose output TVD was within cfg["epsilon"]), the first
    two (B, H, S, S). Examples do not interact: each has its own scores and loss term."""
    real = batch["attention_mask"].bool()
    epsilon = cfg["epsilon"]
    capture = Intervention(capture=True)
    with torch.no_grad():
        original = torch.softmax(models.logits(model, batch, capture).double(), dim=-1)
    attention = capture.probs[layer]
    scores = (attention.clamp_min(1e-9).log()
              + cfg["init_noise"] * noise.to(attention)).requires_grad_()
    padding = ~real[:, None, None, :]
    output = _outputs(model, batch, layer)
    optimizer = torch.optim.Adam([scores], lr=cfg["learning_rate"])
    best, best_jsd = attention.clone(), torch.zeros(len(real), dtype=torch.float64,
                                                     device=real.device)
    feasible_steps = torch.zeros(len(real), dtype=torch.long, device=real.device)
    for _ in range(cfg["steps"]):
        candidate = torch.softmax(scores.masked_fill(padding, -torch.inf), dim=-1)
        tvd = total_variation(original, output(candidate))
        jsd = attention_jsd(attention, candidate, real)
        with torch.no_grad():
            feasible = tvd <= epsilon
            better = feasible & (jsd > best_jsd)
            best[better] = candidate[better].detach()
            best_jsd[better] = jsd[better].detach()
            feasible_steps += feasible
        loss = (-jsd + cfg["penalty"] * (tvd - epsilon).clamp_min(0)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():  # the bound, checked once more on exactly what is kept
        broken = total_variation(original, output(best)) > epsilon
        best[broken] = attention[broken]
    return attention, best, feasible_steps


def searched_layers(model: PreTrainedModel, layers: Sequence[int] | None) -> list[int]:
    """The layers whose adversarial attention is sought: config
    explanation.adversarial_attention.layers (None: every layer), each checked to be one of
    the model's, so that a wrong one fails in one line before any work."""
    layers = list(range(models.num_layers(model))) if layers is None else list(layers)
    for layer in layers:
        models.check_layer(model, layer, "explanation.adversarial_attention.layers")
    return layers


def adversarial_attention(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    layer: int,
    cfg: Mapping[str, Any],
    batch_size: int,
    seed: int,
) -> pd.DataFrame:
    """Jain & Wallace's adversarial attention for layer `layer` of every example; `cfg` is
    config["explanation"]["adversarial_attention"].

    Returns per example: jsd (mean over heads and real query rows, of the adversarial
    attention kept), tvd (of the output with it; <= cfg["epsilon"] always), same_prediction,
    and feasible_steps (optimiser steps whose TVD was within the bound)."""
    device = next(model.parameters()).device
    model.requires_grad_(False)
    frames = []
    n_heads = model.config.num_attention_heads
    inputs, order = examples.by_length(inputs)
    for rows, batch in examples.batches(inputs, batch_size, device):
        width = batch["input_ids"].shape[1]
        noise = torch.zeros(len(batch["input_ids"]), n_heads, width, width)
        for offset, example in enumerate(order[rows].tolist()):
            # drawn per example over its own tokens: the same whatever its batch
            n = int(batch["attention_mask"][offset].sum())
            generator = torch.Generator().manual_seed(
                int(np.random.SeedSequence([seed, layer, example]).generate_state(1)[0]))
            noise[offset, :, :n, :n] = torch.randn(n_heads, n, n, generator=generator)
        attention, best, feasible_steps = search_attention(model, batch, layer, cfg, noise)
        with torch.no_grad():
            original = torch.softmax(models.logits(model, batch).double(), dim=-1)
            final = _outputs(model, batch, layer)(best)
        frames.append(pd.DataFrame({
            "example": order[rows].numpy(), "layer": layer,
            "jsd": attention_jsd(attention, best, batch["attention_mask"].bool()).cpu().numpy(),
            "tvd": total_variation(original, final).cpu().numpy(),
            "same_prediction": (final.argmax(-1) == original.argmax(-1)).cpu().numpy(),
            "feasible_steps": feasible_steps.cpu().numpy(),
        }))
    return pd.concat(frames, ignore_index=True).sort_values("example", ignore_index=True)


def claims(keys: pd.DataFrame, attention: pd.DataFrame, epsilon: float,
           distance_cap: float) -> list[dict[str, Any]]:
    """Drozdyuk et al.'s and Jain & Wallace's statements, judged on one task's tables: findings
    with intervals over the dev examples, and the keys' distance as a check (the training
    drives it to `distance_cap`)."""
    per_example = keys.groupby("example").agg(same=("same_prediction", "first"),
                                              distance=("key_distance", "mean"),
                                              jsd=("jsd", "mean"))
    distance = per_example["distance"].median()
    over = f"95 % interval over {len(per_example)} dev examples"
    large = (f"holds above {LARGE_JSD}: our choice, a seventh of the largest JSD (ln 2); no number "
             "of the papers' we could cite")
    out = [
        finding("adversarial_keys", "adversarial keys keep the original predictions",
                f"share of dev predictions unchanged, {over}, Wilson (holds above "
                f"{SAME_PREDICTIONS}: our choice, the poster's 'every input' less one in twenty)",
                verdicts.share(per_example["same"].to_numpy(dtype=float)),
                Bar(SAME_PREDICTIONS), source("drozdyuk", "keys_keep")),
        # the loss rewards the distance up to distance_cap: reaching it checks the training
        claim("adversarial_keys", "adversarial keys are far from the original keys",
              f"median relative key distance ||K - K_adv|| / ||K|| (holds if >= {FAR_KEYS}; the "
              f"loss rewards it up to distance_cap = {distance_cap})",
              distance, distance >= FAR_KEYS, kind="check"),
        finding("adversarial_keys", "adversarial keys give very different attention",
                f"each example's mean over layers of the JSD of original and adversarial "
                f"attention, nats, {over} ({large})",
                verdicts.bootstrap(per_example["jsd"].to_numpy(), scale=JSD_SCALE),
                Bar(LARGE_JSD), source("drozdyuk", "different_attention")),
    ]
    for layer, group in attention.groupby("layer"):
        out.append(finding(
            "adversarial_attention", "very different attention gives (almost) the same output",
            f"layer {layer}: median over examples of the JSD of adversarial attention with "
            f"output TVD <= {epsilon}, nats, 95 % interval over {len(group)} dev examples "
            f"({large})",
            verdicts.bootstrap(group["jsd"].to_numpy(), _median, scale=JSD_SCALE),
            Bar(LARGE_JSD), source("jain2019", "adversarial")))
    return out


def _median(sample: np.ndarray) -> np.ndarray:
    """The median over the units of each resample (resamples, units)."""
    return np.median(sample, axis=1)
