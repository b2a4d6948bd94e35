"""Words as a reader reads them: the sub-word pieces a tokenizer splits a word into (WordPiece's
"un ##sen ##time ##ntal") merged back into the word ("unsentimental").

A word is one of the pieces of text the tokenizer's pre-tokenizer cuts a text field into before
splitting them into sub-word tokens (what a fast tokenizer's `word_ids()` numbers: for BERT, a
run of letters and digits, or one punctuation mark); each special token ([CLS], [SEP]) is a word
of its own. A word reads as the tokenizer decodes its pieces. A word-level tokenizer (the
synthetic tasks') gives every word one token, so merging changes nothing there.

Scores of token pairs (query i, key j) become scores of word pairs (query word I, key word J):

* attribution: the sum over the piece pairs, Σ_{i∈I} Σ_{j∈J} a_ij. Attributions are additive:
  by completeness the entries of Attr(A^l) sum to F(A) − F(0·A^l), and the attribution of a set
  of attention entries scaled together is the sum of theirs, so the word pair's score is that
  of all its pieces' interactions, and a layer's word matrix sums to the same total;
* attention: the sum over the key word's pieces and the mean over the query word's pieces, as
  Clark et al. 2019 ("What does BERT look at?", section 4) merge it: every word's row still sums
  to 1.

This module needs no torch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
from transformers import BatchEncoding, PreTrainedTokenizerBase

MERGES = ("sum", "mean")  # how the pieces of a query word are merged


def word_ids(encoding: BatchEncoding, row: int, n_tokens: int) -> list[int]:
    """The word of each of the first `n_tokens` tokens of example `row` of a fast tokenizer's
    encoding, numbered 0, 1, ... in order: the pieces of one word of one text field share it,
    each special token has its own."""
    sequences = encoding.sequence_ids(row)[:n_tokens]
    pieces_of = encoding.word_ids(row)[:n_tokens]
    ids: list[int] = []
    current, previous = -1, None
    for sequence, word in zip(sequences, pieces_of, strict=True):
        key = None if sequence is None or word is None else (sequence, word)
        if key is None or key != previous:  # a special token, or the first piece of a word
            current += 1
        ids.append(current)
        previous = key
    return ids


def word_strings(tokens: Sequence[str], ids: Sequence[int], segments: Sequence[int],
                 tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """Each word as the tokenizer decodes its pieces ("unsentimental"); a special token
    (segment −1) as it is."""
    pieces: list[list[str]] = [[] for _ in range(max(ids, default=-1) + 1)]
    special = [False] * len(pieces)
    for token, word, segment in zip(tokens, ids, segments, strict=True):
        pieces[word].append(token)
        special[word] = segment < 0
    return [word[0] if is_special else tokenizer.convert_tokens_to_string(word).strip()
            for word, is_special in zip(pieces, special, strict=True)]


def text_words(text: str, tokenizer: PreTrainedTokenizerBase) -> list[tuple[str, int, int]]:
    """The words of one text field: each as the tokenizer decodes it, with its start and end
    in `text` (characters)."""
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    n = len(encoding["input_ids"])
    ids = word_ids(encoding, 0, n)
    strings = word_strings(encoding.tokens(), ids, [0] * n, tokenizer)
    spans = [[None, None] for _ in strings]
    for word, (start, end) in zip(ids, encoding["offset_mapping"], strict=True):
        spans[word][0] = start if spans[word][0] is None else spans[word][0]
        spans[word][1] = end
    return [(string, start, end) for string, (start, end) in zip(strings, spans, strict=True)]


def membership(ids: Sequence[int]) -> np.ndarray:
    """(W, n): 1 where token t is a piece of word w, else 0."""
    ids = np.asarray(ids)
    out = np.zeros((int(ids.max()) + 1 if len(ids) else 0, len(ids)))
    out[ids, np.arange(len(ids))] = 1.0
    return out


def merge_pairs(matrix: np.ndarray, ids: Sequence[int], query: str = "sum") -> np.ndarray:
    """Token-pair scores (..., n, n) (query rows, key columns) as word-pair scores (..., W, W):
    summed over the key word's pieces, and over the query word's pieces summed (`query` "sum":
    attribution) or averaged ("mean": attention). Exact where every word is one token: the
    membership matrix is then the identity."""
    if query not in MERGES:
        raise ValueError(f"query: {query!r} is not one of {', '.join(MERGES)}")
    keys = membership(ids)
    queries = keys / keys.sum(axis=1, keepdims=True) if query == "mean" else keys
    return queries @ np.asarray(matrix, dtype=np.float64) @ keys.T


def typeable(word: str, special: Collection[str]) -> bool:
    """Whether a reader could type `word` as a trigger: not a special token ([CLS], [UNK], ...)
    and not punctuation alone (it has a letter or a digit)."""
    return word not in special and any(c.isalnum() for c in word)
