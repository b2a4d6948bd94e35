"""The dump rows of a set of examples: each one attributed by the engine
(`attnlab.engine.attribution`) and kept as the row an attribution dump stores
(`attnlab.data.dumps`, whose docstring lists the columns). Rule `attribute` writes them for one
shard of a task's dev split; the trigger and quadrature stages attribute their own examples the
same way."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from tqdm import tqdm
from transformers import BatchEncoding, PreTrainedModel, PreTrainedTokenizerBase

from attnlab.data import tasks, words
from attnlab.data.dumps import PAIR_COLUMNS, completeness_errors, within_tolerance
from attnlab.data.prompts import PromptSpec
from attnlab.engine import next_token
from attnlab.engine.attribution import Attribution, attribute, engine_options
from attnlab.engine.batch_size import examples_per_call, rows_per_pass
from attnlab.engine.examples import encoded_texts
from attnlab.plumbing.device import out_of_memory_names

log = logging.getLogger(__name__)


def _layer_edges(a: torch.Tensor, fraction: float, cap: int) -> dict[str, Any]:
    """Stored edges of one head-summed layer matrix a (n × n)."""
    n = a.shape[0]
    layer_max = a.max()
    layer_max_no_cls = a[1:].max() if n > 1 else layer_max
    # The smaller positive maximum: a tree normalised by a maximum that is not positive has no
    # edges in this layer, so only the positive ones need their edges above tau kept.
    positive = [m.item() for m in (layer_max, layer_max_no_cls) if m > 0]
    floor = fraction * min(positive) if positive else math.inf
    off = a.clone()
    off.fill_diagonal_(-math.inf)
    values, order = off.flatten().sort(descending=True)
    keep = int((values >= floor).sum())
    if keep > cap:
        keep, floor = cap, values[cap - 1].item()
    keep = max(keep, 1) if n > 1 else 0  # the strongest off-diagonal edge is always kept
    order = order[:keep]
    return {
        "i": (order // n).tolist(),
        "j": (order % n).tolist(),
        "score": values[:keep].tolist(),
        "floor": floor if math.isfinite(floor) else float(values[0]) if n > 1 else 0.0,
        "max": layer_max.item(),
        "max_no_cls": layer_max_no_cls.item(),
        "row_sum": (a.sum(dim=1) - a.diagonal()).tolist(),
    }


def _pair_columns(attr: torch.Tensor, attribution: Mapping[str, Any]) -> dict[str, Any]:
    """The PAIR_COLUMNS of a dump row (attnlab.data.dumps) from attributions `attr` (L, H, n, n)
    over n positions: top pairs per head, and each layer's head-summed edges, maxima and row
    sums."""
    n_layers, _, n, _ = attr.shape
    k = min(attribution["top_pairs"], n * n)
    top_score, top_flat = attr.flatten(2).topk(k, dim=-1)
    columns = {"top_i": (top_flat // n).flatten().tolist(),
               "top_j": (top_flat % n).flatten().tolist(),
               "top_score": top_score.flatten().tolist()}
    columns |= {key: [] for key in ("edge_layer", "edge_i", "edge_j", "edge_score", "edge_floor",
                                    "layer_max", "layer_max_no_cls", "row_sum")}
    for layer in range(n_layers):
        edges = _layer_edges(
            attr[layer].sum(dim=0), attribution["edge_min_fraction"],
            attribution["max_edges_per_layer"]
        )
        columns["edge_layer"] += [layer] * len(edges["i"])
        columns["edge_i"] += edges["i"]
        columns["edge_j"] += edges["j"]
        columns["edge_score"] += edges["score"]
        columns["edge_floor"].append(edges["floor"])
        columns["layer_max"].append(edges["max"])
        columns["layer_max_no_cls"].append(edges["max_no_cls"])
        columns["row_sum"] += edges["row_sum"]
    return columns


def example_row(result: Attribution, b: int, attribution: Mapping[str, Any],
                word_ids: list[int] | None = None, *, vocabulary: bool = False
                ) -> dict[str, Any]:
    """The dump row of example b of an engine result (without the dataset columns).
    `word_ids`: the word of each token, where some word is split into pieces: the row's word
    columns then hold its attributions merged to words (null otherwise). `vocabulary`: the
    result's probabilities are a decoder's next-token distribution, not stored."""
    real = result.attention[b, 0, 0].sum(dim=-1) > 0  # padded query rows are all zero
    positions = real.nonzero().flatten()
    attr = result.attr[b][:, :, positions][:, :, :, positions].float().cpu()  # (L, H, n, n)
    attention = result.attention[b][:, :, positions][:, :, :, positions].float().cpu()
    n = attr.shape[-1]

    summed_attention = attention.sum(dim=1)
    for layer_matrix in summed_attention:
        layer_matrix.fill_diagonal_(-math.inf)
    attn_top = summed_attention.flatten(1).argmax(dim=-1)

    row = {
        "target": int(result.target[b]),
        "pred": int(result.probs[b].argmax()),
        "n_tokens": n,
        # a decoder's distribution is over its whole vocabulary: f_full keeps the target's
        "probs": None if vocabulary else result.probs[b].tolist(),
        "f_full": float(result.f_full[b]),
        "f_zero": result.f_zero[b].tolist(),
        "attr_sum": attr.sum(dim=(1, 2, 3)).tolist(),
        "residual": result.residual[b].tolist(),
        "grad_nodes": result.nodes[b].tolist(),
        "attr_max": attr.flatten(2).max(dim=-1).values.flatten().tolist(),
        "attn_max": attention.flatten(2).max(dim=-1).values.flatten().tolist(),
        "attn_top_i": (attn_top // n).tolist(),
        "attn_top_j": (attn_top % n).tolist(),
        "attr_full": attr.flatten().tolist() if attribution["keep_full"] else None,
        **_pair_columns(attr, attribution),
    }
    if word_ids is None:
        by_word = dict.fromkeys(PAIR_COLUMNS)
    else:  # word pairs summed in float64, then on in float32 as the tokens' columns go
        merged = torch.from_numpy(words.merge_pairs(attr.numpy(), word_ids)).float()
        by_word = _pair_columns(merged, attribution)
    return {**row, **{f"word_{name}": value for name, value in by_word.items()}}


def text_columns(tokenizer: PreTrainedTokenizerBase, encoding: BatchEncoding, row: int,
                 input_ids: list[int]) -> dict[str, Any]:
    """tokens, segments, word_ids and words of example `row` of `encoding`, whose real tokens
    are `input_ids`; the word columns null where every word is one token that reads as itself
    (a word-level tokenizer's)."""
    n = len(input_ids)
    tokens = tokenizer.convert_ids_to_tokens(input_ids)
    segments = [-1 if s is None else s for s in encoding.sequence_ids(row)[:n]]
    ids = words.word_ids(encoding, row, n)
    read = words.word_strings(tokens, ids, segments, tokenizer)
    split = read != tokens  # a word in pieces, or one that reads otherwise (BPE's "Ġ")
    return {"tokens": tokens, "segments": segments, "word_ids": ids if split else None,
            "words": read if split else None}


@dataclass(frozen=True)
class DumpRows:
    """The dump rows of some examples, in their order, and what the engine took for them."""

    rows: list[dict[str, Any]]
    n_layers: int
    n_heads: int
    batch_size: int  # rows per forward pass (attribution.batch_size, auto resolved)
    # over every (example, layer) pair: the largest |Σ Attr(A^l) − (F(A) − F(0·A^l))| and how
    # many pairs are above the tolerance, before the dump stores them as float32
    completeness_abs_error_max: float
    outside_tolerance: int


@dataclass(frozen=True)
class _Encoded:
    """Examples as the model reads them, from one tokenization (`encoded_texts`)."""

    idx: list[int]  # each example's idx (its row where the split has none)
    inputs: dict[str, torch.Tensor]  # the engine's, padded to the longest example
    encoding: BatchEncoding  # the tokenization they come from: each token's segment and word
    lengths: torch.Tensor  # each example's real tokens
    planted: list[tuple[int, int] | None] | None  # each example's planted pair, where known
    vocabulary: bool  # a decoder's: its probabilities are over the vocabulary, not stored


def _encoded(examples: pd.DataFrame, spec: tasks.TaskSpec | PromptSpec,
             tokenizer: PreTrainedTokenizerBase, model_settings: Mapping[str, Any]) -> _Encoded:
    """The examples tokenized once, with their planted (query, key) pairs: a next-token task's
    from `next_token.planted_pairs`, a synthetic classification task's from its ground-truth
    columns."""
    inputs, encoding = encoded_texts(examples, spec, tokenizer, model_settings)
    decoder = isinstance(spec, PromptSpec)
    if decoder:
        planted = (next_token.planted_pairs(examples, spec, tokenizer)
                   if "gt_induction" in examples else None)
    else:
        planted = (tasks.planted_token_positions(examples, spec, tokenizer)
                   if set(tasks.GROUND_TRUTH_COLUMNS) <= set(examples.columns) else None)
    idx = examples["idx"].tolist() if "idx" in examples else list(range(len(examples)))
    return _Encoded([int(i) for i in idx], inputs, encoding, inputs["attention_mask"].sum(dim=1),
                    planted, vocabulary=decoder)


@dataclass(frozen=True)
class _Plan:
    """How the examples go through the engine."""

    order: list[int]  # the examples shortest first: similar lengths together waste less padding
    rows_per_pass: int  # scaled copies per forward pass (attribution.batch_size, auto resolved)
    per_call: int  # examples per engine call


def _plan(lengths: torch.Tensor, attribution: Mapping[str, Any], model: PreTrainedModel,
          device: torch.device) -> _Plan:
    """The batch plan of examples of `lengths` tokens; `batch_size: auto` is resolved for the
    longest (`batch_size.rows_per_pass`)."""
    engine = engine_options(attribution)
    rows = rows_per_pass(model.config, engine, int(lengths.max()), device)
    return _Plan(torch.argsort(lengths, stable=True).tolist(), rows,
                 examples_per_call({**engine, "batch_size": rows}))


def _rule(attribution: Mapping[str, Any]) -> str:
    """The quadrature rule in words, for the log."""
    if attribution["quadrature"] == "adaptive":
        return (f"adaptive (tolerance {attribution['tolerance']}, scan "
                f"{attribution['scan_steps']}, at most {attribution['max_steps']} nodes)")
    return f"{attribution['quadrature']} {attribution['steps']}"


def _row(result: Attribution, b: int, example: int, encoded: _Encoded,
         tokenizer: PreTrainedTokenizerBase, attribution: Mapping[str, Any]) -> dict[str, Any]:
    """The dump row of example number `example`, example b of the engine's `result`."""
    real_ids = encoded.inputs["input_ids"][example, : encoded.lengths[example]].tolist()
    text = text_columns(tokenizer, encoded.encoding, example, real_ids)
    row = {**example_row(result, b, attribution, text["word_ids"],
                         vocabulary=encoded.vocabulary), **text}
    row["idx"] = encoded.idx[example]
    # a next-token task's label is its target token (encoded_texts)
    row["label"] = int(encoded.inputs["labels"][example])
    pair = encoded.planted[example] if encoded.planted is not None else None
    row["planted_i"], row["planted_j"] = pair if pair is not None else (None, None)
    return row


def _attributed(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, encoded: _Encoded,
                plan: _Plan, attribution: Mapping[str, Any],
                progress: str) -> tuple[list[dict[str, Any]], Attribution]:
    """Every example through the engine as `plan` says (a bar named `progress`); their rows in
    the examples' order, and the last engine result (for the model's shape)."""
    device = next(model.parameters()).device
    options = {**engine_options(attribution), "batch_size": plan.rows_per_pass}
    rows: dict[int, dict[str, Any]] = {}
    with tqdm(total=len(plan.order), desc=progress, unit="ex") as bar:
        for start in range(0, len(plan.order), plan.per_call):
            group = plan.order[start : start + plan.per_call]
            width = int(encoded.lengths[group].max())
            batch = {k: v[group, :width].to(device) if v.dim() == 2 else v[group].to(device)
                     for k, v in encoded.inputs.items()}
            result = attribute(model, batch, attribution["target"], **options)
            for b, example in enumerate(group):
                rows[example] = _row(result, b, example, encoded, tokenizer, attribution)
            bar.update(len(group))
    return [rows[i] for i in range(len(plan.order))], result


def _completeness(rows: list[dict[str, Any]], attribution: Mapping[str, Any]) -> tuple[float, int]:
    """The largest |Σ Attr(A^l) − (F(A) − F(0·A^l))| over every (example, layer) pair of the
    rows and how many pairs are outside attribution.tolerance (logged)."""
    _, residuals, _ = completeness_errors(
        pd.DataFrame(rows, columns=["f_full", "f_zero", "residual"]))
    outside = int((~within_tolerance(residuals, attribution["tolerance"])).sum())
    if outside:
        log.warning("%d of %d (example, layer) pairs miss the completeness tolerance %g%s",
                    outside, residuals.size, attribution["tolerance"],
                    f" (refinement stopped at max_steps {attribution['max_steps']})"
                    if attribution["quadrature"] == "adaptive" else "")
    return float(residuals.max()), outside


def dump_rows(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: pd.DataFrame,
    spec: tasks.TaskSpec | PromptSpec,
    attribution: Mapping[str, Any],
    model_settings: Mapping[str, Any],
    *,
    bf16: bool = False,
    shard: tuple[int, int] = (0, 1),
) -> DumpRows:
    """Attribute the examples (rows of a prepared split, at least one) into dump rows, on the
    model's device. A next-token task's prompts (`spec` a PromptSpec) are attributed at their
    last token; their label is the target token's id, their planted pair the induction task's
    (`next_token.planted_pairs`).

    `attribution`: the config's `attribution` section, of which the engine (`engine_options`),
    the rows (`example_row`) and the log read theirs, and its `target`; `model_settings`: the
    config's `model` section, whose max_length and truncate the examples are tokenized under.
    `bf16`: the forward and backward passes run under bfloat16 autocast; F, the gradients' sum
    over the quadrature nodes and Attr stay float32 or float64 (the engine's own casts).
    `shard` (k, of n) says which part of a split the examples are, in the log and the progress
    bar.
    """
    device = next(model.parameters()).device
    encoded = _encoded(examples, spec, tokenizer, model_settings)
    plan = _plan(encoded.lengths, attribution, model, device)
    log.info("task %s shard %d/%d: %d examples, quadrature %s, target %s, %d rows per pass%s",
             spec.name, *shard, len(examples), _rule(attribution), attribution["target"],
             plan.rows_per_pass, ", bf16 autocast" if bf16 else "")
    with (out_of_memory_names("attribution.batch_size", attribution["batch_size"],
                              f"attributing task {spec.name} ({plan.rows_per_pass} rows per "
                              f"pass, up to {int(encoded.lengths.max())} tokens)"),
          torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)):
        rows, result = _attributed(model, tokenizer, encoded, plan, attribution,
                                   f"attribute {spec.name}[{shard[0]}]")
    error_max, outside = _completeness(rows, attribution)
    return DumpRows(rows=rows, n_layers=result.attr.shape[1], n_heads=result.attr.shape[2],
                    batch_size=plan.rows_per_pass, completeness_abs_error_max=error_max,
                    outside_tolerance=outside)
