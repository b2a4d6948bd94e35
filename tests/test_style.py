"""Code a newcomer reads top to bottom: no function longer than a screenful."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The longest a function may be, in lines from its `def` to its last line (docstring and
# comments included): longer ones are split into named pieces.
MAX_LINES = 60
# Where the code a newcomer reads lives: the library, the benchmarks, the docs' generators
# and the rules' scripts.
SOURCES = ("src/**/*.py", "benchmarks/**/*.py", "docs/*.py", "workflow/scripts/**/*.py")


def function_lengths() -> dict[str, int]:
    """Every function and method of SOURCES, as path:name, with its length in lines."""
    lengths = {}
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = f"{path.relative_to(ROOT)}:{node.name}"
                    lengths[name] = max(lengths.get(name, 0), node.end_lineno - node.lineno + 1)
    return lengths


def test_no_function_is_longer_than_a_screenful():
    lengths = function_lengths()
    # the walk finds the functions: the attribution engine's entry point among them
    assert "src/attnlab/engine/attribution.py:attribute" in lengths
    too_long = {name: n for name, n in lengths.items()
                if n > MAX_LINES}
    assert not too_long, f"functions longer than {MAX_LINES} lines, to split: {too_long}"
