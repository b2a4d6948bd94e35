"""Head importance (Hao et al. 2021 §4, docs/methods.md): how much each attention head matters.

Six methods score every head (layer l, head h) over the first N held-out dev examples:

    attribution          E_x[max_ij Attr_h(A^l)(x)]       read from the attribution dumps
    attention            E_x[max_ij A^l_h(x)]             read from the attribution dumps
                         (a decoder's: E_x[max_j A^l_h(x)_qj] at its query q, see below)
    taylor               E_x|∂L(x)/∂ξ_h|, L2-normalised within each layer (Michel et al. 2019;
                         L = cross-entropy to the gold label, a decoder's to the next token
                         at its query; ξ a gate on the head, ξ = 1)
    attribution_patching E_x[∂L(x)/∂o_h · (ō_h − o_h(x))] (Nanda 2023): the first-order
                         estimate of how much replacing head h's output o_h by its mean ō_h
                         over the examples' positions (mean ablation) raises L; taylor's is
                         the same gradient toward a zero output
    accuracy_difference  acc(all heads) − acc(head h masked)
    random               uniform scores, one row set per seed (curves average over seeds)

A head is gated or masked by multiplying its attention probabilities (`Intervention.head_mask`):
its output is A·V, so a factor ξ on A is a factor ξ on the head's output.

A decoder's (causal) attention gives its first token one key, itself, with weight 1, so every
head's max_ij A is 1 and the paper's attention score ranks no head above another: a decoder's
heads are ranked by their largest weight in the row of the query, the last real token, whose
next token the model predicts (`models.read_positions`: the row a classifier's [CLS] would be).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.data.dumps import HEAD_SCORES
from attnlab.engine import examples, models
from attnlab.engine.intervention import Intervention
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.preflight import check_after

METHODS = ("attribution", "attention", "taylor", "attribution_patching", "accuracy_difference",
           "random")


def evaluation_split(n_dev: int, n_attributed: int, *, importance_examples: int,
                     min_evaluation: int, task: str) -> int:
    """How many of the first dev examples score the heads (`examples.held_out`: the requested
    number, or all attributed ones); the dev examples after them, disjoint from them, evaluate
    global pruning. Refuses a configuration that leaves fewer than `min_evaluation` for the
    task `task` (`preflight.check_after`, the dry run's check too)."""
    n = examples.held_out(importance_examples, n_attributed)
    check_after({"heads": {"importance_examples": importance_examples,
                           "min_evaluation_examples": min_evaluation}}, task,
                "heads.min_evaluation_examples", n_split=n_dev, n_before=n)
    return n


def attention_and_query(
    model: PreTrainedModel, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention probabilities of every layer of `batch` as (B, L, H, Q, K), and each
    example's query: the position the model's output is read from."""
    seen = Intervention(capture=True)
    models.logits(model, batch, seen)
    probs = torch.stack([seen.probs[layer] for layer in sorted(seen.probs)], dim=1)
    return probs, models.read_positions(model, batch["attention_mask"])


def query_attention_max(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], batch_size: int = 64
) -> np.ndarray:
    """Each head's largest attention weight in the row of the position the model's output is
    read from (a decoder's last real token), for every example: (N, L, H)."""
    device = next(model.parameters()).device
    inputs, order = examples.by_length(inputs)
    out = []
    with torch.no_grad():
        for _, batch in examples.batches(inputs, batch_size, device):
            probs, query = attention_and_query(model, batch)
            rows = torch.arange(len(probs), device=probs.device)
            out.append(probs[rows, :, :, query].amax(dim=-1).double().cpu())  # (B, L, H)
    return examples.in_input_order(torch.cat(out), order).numpy()


def ranking_scores(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    dump_arrays: dict[str, np.ndarray],
    batch_size: int = 64,
) -> dict[str, np.ndarray]:
    """The per-example (N, L, H) scores heads are ranked by, by the names of HEAD_SCORES: the
    dumps' maxima of the examples in `inputs`, a decoder's attention read at its query
    (`query_attention_max`; the module's docstring says why)."""
    if not models.family_of(model).causal:
        return dump_arrays
    return {**dump_arrays, "attention": query_attention_max(model, inputs, batch_size)}


def mean_head_outputs(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], batch_size: int = 64
) -> dict[int, torch.Tensor]:
    """Each head's mean output A·V over every real position of the examples in `inputs`, by
    layer: (H, d_v) each, what `Intervention.head_fill` puts in place of a mean-ablated head."""
    device = next(model.parameters()).device
    sums: dict[int, torch.Tensor] = {}
    count = 0
    with torch.no_grad():
        for _, batch in examples.batches(examples.by_length(inputs)[0], batch_size, device):
            seen = Intervention(capture=True, capture_values=True)
            models.logits(model, batch, seen)
            real = batch["attention_mask"][:, None, :, None].to(seen.values[0].dtype)
            for layer, probs in seen.probs.items():
                output = (probs @ seen.values[layer]) * real  # (B, H, Q, d_v)
                sums[layer] = sums.get(layer, 0) + output.sum(dim=(0, 2)).double()
            count += int(batch["attention_mask"].sum())
    return {layer: (total / count).to(next(model.parameters()).dtype)
            for layer, total in sums.items()}


def taylor_gradients(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    batch_size: int = 64,
    fill: dict[int, torch.Tensor] | None = None,
) -> torch.Tensor:
    """∂L(x)/∂ξ_h for every example x and head h at ξ = 1: (N, L, H), the head's output gated
    as ξ·o_h + (1 − ξ)·fill_h (`Intervention.head_fill`; absent: toward zero).

    Each batch row gets its own gates, so one backward pass of the summed loss gives every
    example's own gradient (examples do not interact).
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    n_layers, n_heads = models.head_shape(model)
    inputs, order = examples.by_length(inputs)
    out = []
    for _, batch in examples.batches(inputs, batch_size, device):
        gates = torch.ones(len(batch["labels"]), n_layers, n_heads, dtype=dtype, device=device,
                           requires_grad=True)
        logits = models.logits(model, batch, Intervention(head_mask=gates, head_fill=fill or {}))
        loss = torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")
        (grad,) = torch.autograd.grad(loss, gates)
        out.append(grad.cpu())
    return examples.in_input_order(torch.cat(out), order)


def taylor_importance(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], batch_size: int = 64
) -> np.ndarray:
    """Michel et al.'s I_h = E_x|∂L/∂ξ_h|, each layer scaled to unit L2 norm: (L, H)."""
    scores = taylor_gradients(model, inputs, batch_size).abs().mean(dim=0).double().numpy()
    norms = np.linalg.norm(scores, axis=1, keepdims=True)
    return scores / np.where(norms > 0, norms, 1.0)


def attribution_patching_importance(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], batch_size: int = 64
) -> np.ndarray:
    """Nanda 2023's estimate of each head's mean-ablation effect on the loss, averaged over the
    examples: E_x[∂L/∂o_h · (ō_h − o_h)] = −E_x[∂L/∂ξ_h] with the gate toward the mean (L, H).
    Signed: a head whose ablation would lower the loss scores below 0."""
    fill = mean_head_outputs(model, inputs, batch_size)
    return -taylor_gradients(model, inputs, batch_size, fill).mean(dim=0).double().numpy()


def accuracy_difference_importance(
    model: PreTrainedModel, inputs: dict[str, torch.Tensor], batch_size: int = 64
) -> np.ndarray:
    """acc(all heads) − acc(head h masked), one head at a time: (L, H). The passes share each
    batch's unmasked hidden states: a head of layer l's starts at layer l
    (`examples.outcomes`)."""
    n_layers, n_heads = models.head_shape(model)
    # mask i removes the head of flat index i; the last one removes none
    masks = 1 - torch.eye(n_layers * n_heads + 1, n_layers * n_heads)
    correct, _ = examples.outcomes(model, inputs, masks.reshape(-1, n_layers, n_heads),
                                   batch_size)
    accuracy = correct.mean(dim=1)
    return (accuracy[-1] - accuracy[:-1]).reshape(n_layers, n_heads).numpy()


def random_importance(n_layers: int, n_heads: int, seed: int, index: int) -> np.ndarray:
    """Uniform random scores (a random head order), the `index`-th draw under `seed`."""
    return np.random.default_rng([seed, index]).random((n_layers, n_heads))


def _rows(method: str, seed: int | None, scores: np.ndarray) -> pd.DataFrame:
    layers, heads = np.indices(scores.shape)
    return pd.DataFrame({
        "method": method,
        "seed": pd.array([seed] * scores.size, dtype="Int64"),
        "layer": layers.ravel(),
        "head": heads.ravel(),
        "importance": scores.ravel().astype(float),
    })


def importance_table(
    model: PreTrainedModel,
    inputs: dict[str, torch.Tensor],
    dump_arrays: dict[str, np.ndarray],
    methods: list[str],
    random_seeds: int,
    seed: int,
    batch_size: int = 64,
) -> pd.DataFrame:
    """Importance of every head by each method, over the examples in `inputs`.

    `dump_arrays` holds the (N, L, H) scores of the same examples, in order, by the names of
    HEAD_SCORES (`ranking_scores`).
    Columns: method, seed (random only), layer, head, importance.
    """
    n_layers, n_heads = models.head_shape(model)
    frames = []
    for method in methods:
        if method in HEAD_SCORES:
            frames.append(_rows(method, None, dump_arrays[method].mean(axis=0)))
        elif method == "taylor":
            frames.append(_rows(method, None, taylor_importance(model, inputs, batch_size)))
        elif method == "attribution_patching":
            scores = attribution_patching_importance(model, inputs, batch_size)
            frames.append(_rows(method, None, scores))
        elif method == "accuracy_difference":
            scores = accuracy_difference_importance(model, inputs, batch_size)
            frames.append(_rows(method, None, scores))
        elif method == "random":
            frames += [_rows(method, i, random_importance(n_layers, n_heads, seed, i))
                       for i in range(random_seeds)]
        else:
            raise ConfigError(f"heads.methods: unknown method {method!r}; "
                             f"choose from {', '.join(METHODS)}")
    return pd.concat(frames, ignore_index=True)
