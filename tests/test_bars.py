"""Every statement a finding judges says where its bar comes from, and every finding's source
names a statement its paper's file has (src/attnlab/analyses/papers/*.yaml)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnlab
from attnlab.analyses import attention_permutation, token_mixing
from attnlab.analyses.claims import PAPERS, paper

# the kinds of bar (docs/methods.md, "How a finding is judged"): the source's own words with
# its number or direction, a comparison whose other side is the bar, or our choice and why
KINDS = ("printed", "comparison", "ours")
SRC = Path(attnlab.__file__).parent
# `source` calls whose arguments are not written where the call is: induction_heads' loop over
# its comparisons (its tests run it, and `source` refuses an unknown key), and the report's
# loop over the files' own statements
LOOPED = {("analyses/induction_heads.py", "paper", "key"), ("report/summary.py", "name", "key")}


def _statements() -> list[tuple[str, str, dict]]:
    return [(path.stem, key, entry) for path in sorted(PAPERS.glob("*.yaml"))
            for key, entry in paper(path.stem)["statements"].items()]


@pytest.mark.parametrize(("name", "key", "entry"), _statements(),
                         ids=[f"{name}.{key}" for name, key, _ in _statements()])
def test_every_statement_a_finding_judges_says_where_its_bar_comes_from(name, key, entry):
    """One kind of KINDS with a reason; a statement no run can test (`untested`) has no
    finding and needs none."""
    if "untested" in entry and "bar" not in entry:
        return
    bar = entry.get("bar")
    assert isinstance(bar, dict) and len(bar) == 1, f"{name}.{key}: bar is one of {KINDS}"
    (kind, why), = bar.items()
    assert kind in KINDS, f"{name}.{key}: bar kind {kind!r} is not one of {KINDS}"
    assert isinstance(why, str) and len(why.split()) >= 5, f"{name}.{key}: say why"


def test_the_printed_bars_are_the_numbers_the_code_judges_against():
    """The constants the findings are judged against are the numbers the sources print."""
    mixing = paper("brunner2020")["statements"]["mixing"]["bar"]["printed"]
    assert f"{token_mixing.PRINTED_NOT_SELF:.0%} of the tokens are not" in mixing
    assert f"within {token_mixing.ROUNDING * 100:g} points" in mixing
    poster = paper("drozdyuk")["statements"]["first_layer"]["bar"]["printed"]
    assert f"only {attention_permutation.POSTER_FIRST_LAYER_DROP * 100:g} percent" in poster
    printed = {(name, key) for name, key, entry in _statements()
               if "printed" in entry.get("bar", {})}
    assert printed == {("brunner2020", "mixing"), ("drozdyuk", "first_layer")}


def _source_calls() -> tuple[list[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """(file, paper, key) of every `source(...)` call of the package whose two arguments are
    strings, or names bound to strings in its module, and those that are not."""
    resolved, looped = [], set()
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        strings: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                targets, values = node.targets[0], node.value
                pairs = (zip(targets.elts, values.elts, strict=False)
                         if isinstance(targets, ast.Tuple) and isinstance(values, ast.Tuple)
                         else [(targets, values)])
                strings.update({t.id: v.value for t, v in pairs if isinstance(t, ast.Name)
                                and isinstance(v, ast.Constant) and isinstance(v.value, str)})
        where = str(path.relative_to(SRC))
        for node in ast.walk(tree):
            func = getattr(node, "func", None)
            name = getattr(func, "attr", getattr(func, "id", None))
            if not isinstance(node, ast.Call) or name != "source" or len(node.args) != 2:
                continue
            args = [a.value if isinstance(a, ast.Constant) else strings.get(a.id, a.id)
                    if isinstance(a, ast.Name) else None for a in node.args]
            if all(isinstance(a, ast.Name) and a.id not in strings for a in node.args):
                looped.add((where, *(a.id for a in node.args)))
            else:
                resolved.append((where, *args))
    return resolved, looped


def test_every_finding_s_source_is_a_statement_of_its_paper_s_file():
    resolved, looped = _source_calls()
    # the findings' stages cite papers in some three dozen places
    assert len(resolved) > 30
    known = {(name, key) for name, key, _ in _statements()}
    missing = [call for call in resolved if tuple(call[1:]) not in known]
    assert not missing, f"source(paper, key) with no such statement: {missing}"
    assert looped == LOOPED
