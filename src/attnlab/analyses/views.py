"""Per-example views of attribution: attention next to attribution for one layer (the paper's
motivating figure), and how much attribution flows through every token, layer by layer (the
view the seed notebook was after). The figures and the page are drawn by
`attnlab.report.flow_figures`.

The dumps keep no full matrices by default, so the few sampled examples are attributed again
with the engine and the dumps' own settings (their per-head maxima are checked against the
dump, to the engine's float tolerance). Then the pieces of every word the tokenizer split are
merged (attnlab.data.words): attribution summed over the pieces of the query word and of the
key word, attention summed over the key word's pieces and averaged over the query word's
(Clark et al. 2019), so the views read words.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.data import words
from attnlab.data.dumps import has_words
from attnlab.engine.attribution import Attribution, attribute, engine_options
from attnlab.engine.batch_size import rows_per_pass
from attnlab.plumbing.errors import ConfigError


def attribute_again(
    model: PreTrainedModel,
    encoded: dict[str, torch.Tensor],
    attribution: Mapping[str, Any],
    device: torch.device,
) -> Attribution:
    """The full attributions of tokenized examples, with the config's `attribution` section (the
    engine's settings and target) as the dumps were made, as many rows per pass as `device`
    holds."""
    engine = engine_options(attribution)
    engine["batch_size"] = rows_per_pass(model.config, engine, encoded["input_ids"].shape[1],
                                         device)
    return attribute(model, {k: v.to(device) for k, v in encoded.items()},
                     attribution["target"], **engine)


def example_matrices(result: Attribution, b: int, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Attribution and attention (L, H, n, n) of example `b` of `result`, over its n real
    tokens."""
    attr = result.attr[b, :, :, :n_tokens, :n_tokens].double().cpu().numpy()
    attention = result.attention[b, :, :, :n_tokens, :n_tokens].double().cpu().numpy()
    return attr, attention


def word_maps(row: pd.Series, maps: Mapping[str, np.ndarray], *,
              summed: Collection[str]) -> dict[str, np.ndarray]:
    """Maps (..., n, n) of a dump row's example over its W words (..., W, W): those named in
    `summed` (attribution) summed over the pieces of the query word and of the key word, the
    others (attention) summed over the key word's pieces and averaged over the query word's, so
    that an attention row still sums to 1; as they are where every word is one token (null
    word_ids)."""
    if not has_words(row):
        return dict(maps)
    ids = row["word_ids"]
    return {name: words.merge_pairs(values, ids) if name in summed
            else words.merge_pairs(values, ids, query="mean") for name, values in maps.items()}


def method_maps(scores: pd.DataFrame, idx: int) -> dict[str, np.ndarray]:
    """Each interaction method's (L, n, n) scores of example `idx` from a table of scores (rule
    interaction_methods' scores file: idx, method, layer, n_tokens and the n·n scores); empty
    where it was not scored."""
    rows = scores[scores["idx"] == idx].sort_values("layer", kind="stable")
    return {method: np.stack([np.reshape(flat, (n, n)) for flat, n in
                              zip(layers["scores"], layers["n_tokens"], strict=True)])
            for method, layers in rows.groupby("method", sort=False)}


def dump_gap(row: pd.Series, attr: np.ndarray) -> float:
    """How far the per-head maxima of attributions `attr` (L, H, n, n) computed again are from
    those of the example's dump row."""
    stored = np.asarray(row["attr_max"]).reshape(attr.shape[:2])
    return np.abs(attr.max(axis=(2, 3)) - stored).max()


def token_flow(layers: np.ndarray) -> np.ndarray:
    """Attribution flowing through each token in each layer, (L, n) from head-summed layer
    matrices (L, n, n): the attribution of every interaction the token takes part in, as the
    query (row) or as the key (column), its interaction with itself left out."""
    diagonal = np.diagonal(layers, axis1=1, axis2=2)
    return layers.sum(axis=2) + layers.sum(axis=1) - 2 * diagonal


def heatmap_layer(layer: int | None, attr: np.ndarray) -> int:
    """The layer to draw for an example with attributions `attr` (L, H, n, n): `layer` counted
    from 0, or from the end when negative (-1 is the last layer); None: the layer holding the
    example's largest attribution entry."""
    n_layers = len(attr)
    if layer is None:
        return int(attr.reshape(n_layers, -1).max(axis=1).argmax())
    if not -n_layers <= layer < n_layers:
        raise ConfigError(f"trees.heatmap_layer: {layer} is not a layer of the model "
                         f"(0..{n_layers - 1}, or -{n_layers}..-1 from the end)")
    return layer % n_layers
