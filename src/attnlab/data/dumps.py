"""Per-example attribution dumps: the contract between `attribute` and every later stage.
Writing and reading them; the rows come from `attnlab.engine.dump_rows`.

One Parquet row per example (zstd), one file per (task, shard), hive-partitioned as
`attributions/task=<task>/shard=<k>/part.parquet`. Per-layer and per-head arrays are
flattened row-major; the shape (n_layers, n_heads, top_pairs) is in the file metadata
under `attnlab`, together with the config and code version the file came from.

Columns (L layers, H heads, n real tokens, k = top_pairs, E stored edges):

    idx, label, pred, target      int64   dataset index; gold, predicted and attributed class
                                          (a decoder's: token ids of the next token)
    n_tokens                      int32   n (padding excluded; positions below are 0..n-1)
    tokens                        list<str>   the n tokens
    segments                      list<int8>  per token: 0 / 1 = text field, -1 = special
    probs                         list<f32>   class probabilities (null for a decoder, whose
                                              distribution is over its vocabulary)
    f_full                        f32         F(A): probability of `target`
    f_zero, attr_sum              list<f32> L F(0·A^l) and Σ Attr(A^l) (completeness check)
    residual                      list<f32> L Σ Attr(A^l) − (F(A) − F(0·A^l)), summed in float64
    grad_nodes                    list<i16> L gradient evaluations the integral of layer l took
    attr_max, attn_max            list<f32> L·H  max_ij Attr_h(A^l), max_ij A^l_h
    top_i, top_j, top_score       list L·H·k  top-k (query, key) entries of Attr_h(A^l)
    edge_layer, edge_i, edge_j, edge_score   list E  head-summed edges a^l_ij, i != j
    edge_floor                    list<f32> L every edge of layer l with a^l_ij > floor is stored
    layer_max, layer_max_no_cls   list<f32> L max of a^l over all rows / rows except 0 ([CLS])
    row_sum                       list<f32> L·n Σ_{j != i} a^l_ij per query token i
    attn_top_i, attn_top_j        list<i16> L strongest off-diagonal head-summed attention edge
    planted_i, planted_j          int16     token positions of the deciding planted pair (null for
                                            real data and for synthetic examples no pair decides;
                                            the induction task's: the last token and B's first
                                            position)
    attr_full                     list<f32> L·H·n·n, only with attribution.keep_full
    word_ids                      list<i16> n  the word each token is a piece of, 0..W−1
    words                         list<str> W  each word as the tokenizer decodes its pieces
    word_<c>, c in PAIR_COLUMNS   column c over the W words: the pair scores of each layer's
                                  (and head's) attributions merged to words by
                                  attnlab.data.words.merge_pairs (sum over the piece pairs)

a^l = Σ_h Attr_h(A^l) restricted to the real tokens. Edges kept per layer: off-diagonal
entries ≥ edge_min_fraction × the smaller positive one of layer_max and layer_max_no_cls —
enough to rebuild the attribution tree for any τ ≥ edge_min_fraction under either
normalisation — at most max_edges_per_layer of them (strongest first; edge_floor says where a
cap cut).

The word columns are null where every word is one token that reads as itself (always on a
word-level tokenizer, such as the synthetic tasks'): the token columns are the word columns
then. They are made at attribution time, from the full matrices: a word pair's sum needs every
piece pair, and the stored edges keep only the strong ones.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from attnlab.plumbing.errors import AttnlabError
from attnlab.plumbing.outputs import atomic_path

log = logging.getLogger(__name__)

F32, I16 = pa.float32(), pa.int16()
# The columns that name (query, key) positions or hold one value per position: the dump keeps
# them over the tokens and, where a word is split into pieces, over the words (word_<column>).
PAIR_COLUMNS = ("top_i", "top_j", "top_score", "edge_layer", "edge_i", "edge_j", "edge_score",
                "edge_floor", "layer_max", "layer_max_no_cls", "row_sum")
_FIELDS = [
    ("idx", pa.int64()),
    ("label", pa.int64()),
    ("pred", pa.int64()),
    ("target", pa.int64()),
    ("n_tokens", pa.int32()),
    ("tokens", pa.list_(pa.string())),
    ("segments", pa.list_(pa.int8())),
    ("probs", pa.list_(F32)),
    ("f_full", F32),
    ("f_zero", pa.list_(F32)),
    ("attr_sum", pa.list_(F32)),
    ("residual", pa.list_(F32)),
    ("grad_nodes", pa.list_(I16)),
    ("attr_max", pa.list_(F32)),
    ("attn_max", pa.list_(F32)),
    ("top_i", pa.list_(I16)),
    ("top_j", pa.list_(I16)),
    ("top_score", pa.list_(F32)),
    ("edge_layer", pa.list_(pa.int8())),
    ("edge_i", pa.list_(I16)),
    ("edge_j", pa.list_(I16)),
    ("edge_score", pa.list_(F32)),
    ("edge_floor", pa.list_(F32)),
    ("layer_max", pa.list_(F32)),
    ("layer_max_no_cls", pa.list_(F32)),
    ("row_sum", pa.list_(F32)),
    ("attn_top_i", pa.list_(I16)),
    ("attn_top_j", pa.list_(I16)),
    ("planted_i", I16),
    ("planted_j", I16),
    ("attr_full", pa.list_(F32)),
    ("word_ids", pa.list_(I16)),
    ("words", pa.list_(pa.string())),
]
SCHEMA = pa.schema(_FIELDS + [(f"word_{name}", dict(_FIELDS)[name]) for name in PAIR_COLUMNS])


def write_dump(rows: list[dict[str, Any]], path: str | os.PathLike, meta: dict[str, Any]) -> None:
    """Write dump rows to one zstd Parquet file, atomically, with `meta` under `attnlab`."""
    schema = SCHEMA.with_metadata({"attnlab": json.dumps(meta, default=str)})
    table = pa.Table.from_pylist(rows, schema=schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def dump_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Dump rows as a DataFrame with the dump's column types: what `read_dump` gives back once
    they are written, without the file."""
    return pa.Table.from_pylist(rows, schema=SCHEMA).to_pandas()


def read_dump(path: str | os.PathLike) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A dump file (or hive-partitioned folder) as a DataFrame, with the metadata of its files."""
    table = pq.read_table(path)
    meta = json.loads((table.schema.metadata or {}).get(b"attnlab", b"{}"))
    return table.to_pandas(), meta


def read_task_dump(paths: list[str | os.PathLike]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A task's attribution shards, concatenated in shard order (= dev split order).

    Fails unless the files are every shard of one split into `n_shards` (from their metadata).
    """
    frames, meta, splits = {}, {}, set()
    for path in paths:
        frame, meta = read_dump(path)
        frames[meta["shard"]] = frame
        splits.add(meta["n_shards"])
    if len(splits) > 1:
        raise AttnlabError(f"attribution shards come from splits into {sorted(splits)} shards "
                         "(rerun attribute)")
    missing = sorted(set(range(meta.get("n_shards", 0))) - set(frames))
    if not frames or missing:
        raise AttnlabError(f"attribution shards missing: {missing or 'all'} (rerun attribute)")
    return pd.concat([frames[k] for k in sorted(frames)], ignore_index=True), meta


def has_words(row: pd.Series) -> bool:
    """Whether a dump row keeps word columns: some word of its example is not one token that
    reads as itself."""
    ids = row.get("word_ids")
    return not (ids is None or (np.isscalar(ids) and pd.isna(ids)))


def word_row(row: pd.Series) -> pd.Series:
    """A dump row as stored, over its words: tokens (the words), n_tokens (their number),
    segments, planted_i, planted_j and the PAIR_COLUMNS name words, so that what reads the
    positions of a row (trees, views, trigger patterns) reads words. A row whose words are its
    tokens (null word columns) is returned as it is. The other columns are as stored: per-head
    maxima, attention edges (attn_top_*, over tokens) and word_ids, the map from tokens to words."""
    if not has_words(row):
        return row
    ids = np.asarray(row["word_ids"])
    first_piece = np.unique(ids, return_index=True)[1]

    def word_of(position) -> int | None:
        return None if pd.isna(position) else int(ids[int(position)])

    return pd.Series({
        **row.to_dict(), **{name: row[f"word_{name}"] for name in PAIR_COLUMNS},
        "tokens": list(row["words"]), "n_tokens": len(row["words"]),
        "segments": np.asarray(row["segments"])[first_piece].tolist(),
        "planted_i": word_of(row["planted_i"]), "planted_j": word_of(row["planted_j"]),
    }, name=row.name)


def word_level(dump: pd.DataFrame) -> pd.DataFrame:
    """Every row of a dump over its words (`word_row`); the dump itself where no word is split
    (the synthetic tasks' dumps)."""
    if "word_ids" not in dump or dump["word_ids"].isna().all():
        return dump
    return pd.DataFrame([word_row(row) for _, row in dump.iterrows()]).infer_objects()


def dump_scores(dump: pd.DataFrame, column: str, n_layers: int, n_heads: int) -> np.ndarray:
    """A per-head dump column (attr_max or attn_max) as an (N, L, H) array."""
    return np.stack(dump[column].to_numpy()).reshape(len(dump), n_layers, n_heads)


def full_attributions(dump: pd.DataFrame, n_layers: int, n_heads: int,
                      width: int) -> np.ndarray:
    """The full per-head attributions of a dump's rows (attr_full, kept with
    attribution.keep_full) as (N, L, H, width, width), each example's n real tokens first and
    zero beyond them, as the engine gives right-padded prompts' (`attribution.attribute`).

    Fails unless every row holds them."""
    if dump["attr_full"].isna().any():
        raise AttnlabError("the attribution dump holds no full matrices (attr_full): set "
                           "attribution.keep_full: true and rerun attribute")
    out = np.zeros((len(dump), n_layers, n_heads, width, width), dtype=np.float32)
    for row, (n, flat) in enumerate(zip(dump["n_tokens"], dump["attr_full"], strict=True)):
        out[row, :, :, :n, :n] = np.asarray(flat, dtype=np.float32).reshape(
            n_layers, n_heads, n, n)
    return out


# The per-head maxima a dump holds, by what they measure: the scores the head analyses
# (importance, pruning) rank heads by.
HEAD_SCORES = {"attribution": "attr_max", "attention": "attn_max"}


def attributed_head_scores(
    paths: list[str | os.PathLike],
    dev: pd.DataFrame,
    *,
    head_shape: tuple[int, int],
    target: str,
) -> dict[str, np.ndarray]:
    """The per-head maxima of a task's attributed examples, by the names of HEAD_SCORES, as
    (N, L, H) arrays: N is the number of attributed examples, the first N of `dev` in order.

    Fails unless the dumps hold `head_shape` (L, H) heads, the model's, and their rows are the
    first dev examples. The paper ranks heads by gold-label attributions: with `target` "pred"
    (the dumps' attribution.target) that is said in the log.
    """
    if target == "pred":
        log.warning("attribution.target is 'pred': head rankings use attributions to the "
                    "predicted label, not the gold label as in the paper")
    dump, meta = read_task_dump(paths)
    if (meta["n_layers"], meta["n_heads"]) != head_shape:
        raise AttnlabError(f"the attribution dump has {meta['n_layers']}x{meta['n_heads']} "
                           f"heads, the model {head_shape}: rebuild it with "
                           "--forcerun attribute")
    if "idx" in dev and not np.array_equal(dump["idx"], dev["idx"].iloc[: len(dump)]):
        raise AttnlabError("the attribution dump's rows are not the first dev examples in "
                           "order: rebuild it with --forcerun attribute")
    return {name: dump_scores(dump, column, meta["n_layers"], meta["n_heads"])
            for name, column in HEAD_SCORES.items()}


# A completeness error relative to the change F(A) − F(0·A^l) is taken only where removing the
# layer moves F by at least this much (in units of F, a probability): on a saturated model most
# layers barely move F, and an absolute error within the tolerance over a change of 1e-8 would
# read as an error of 10^5 (the quadrature study compares layers above the same floor).
RELATIVE_FLOOR = 0.05


def completeness_errors(dump: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per example (row) and layer (column) of a dump: the change F(A) − F(0·A^l), the
    absolute completeness error |Σ Attr(A^l) − (F(A) − F(0·A^l))| (the quantity the tolerance
    bounds) and the error relative to the change where |change| >= RELATIVE_FLOOR (NaN
    elsewhere)."""
    delta = dump["f_full"].to_numpy()[:, None] - np.stack(dump["f_zero"].to_numpy())
    absolute = np.abs(np.stack(dump["residual"].to_numpy()))
    moved = np.abs(delta) >= RELATIVE_FLOOR
    relative = np.full(absolute.shape, np.nan)
    relative[moved] = absolute[moved] / np.abs(delta[moved])
    return delta, absolute, relative


def within_tolerance(absolute: np.ndarray, tolerance: float) -> np.ndarray:
    """Whether each absolute completeness error (`completeness_errors`) is within the tolerance
    (attribution.tolerance, in units of F), as the adaptive rule guarantees: the one test of
    the tolerance, whether a shard's rows, a task's summary or the quadrature study asks."""
    return absolute <= tolerance
