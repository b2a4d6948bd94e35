"""The version of the code a workflow rule runs: a hash of its library modules' source.

Snakemake cannot see edits inside a package, so each rule passes `code_version(its stage
module)` as a param and reruns when the code it runs changes, and only then. The code a module
runs is the module and every attnlab module it imports, directly or not (`code_closure`),
read from the `import` statements of the source, across the layer folders.

Modules are named by their dotted path below the package: "stages.trees", "engine.models".
The packages' `__init__` files are not part of any closure: the top one imports its public
names lazily, the layer folders' hold only their docstring (a test keeps them so).
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

from attnlab import _EXPORTS

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def module_file(module: str) -> Path:
    """The source file of the attnlab module `module` ("engine.models")."""
    return PACKAGE_DIR.joinpath(*module.split(".")).with_suffix(".py")


def library_modules() -> list[str]:
    """Every module of the library, by dotted name, the packages' `__init__` files aside."""
    return sorted(".".join(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
                  for path in PACKAGE_DIR.rglob("*.py") if path.name != "__init__.py")


# Each rule's closure shares most of its modules with the others': parsed once per process,
# not once per rule (a parse of the Snakefile would otherwise read ~600 module sources).
@cache
def attnlab_imports(module: str) -> frozenset[str]:
    """The attnlab modules that `module` imports directly."""
    tree = ast.parse(module_file(module).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "attnlab":
            # a public name of the package: the module that defines it
            found.update(_EXPORTS[alias.name] for alias in node.names if alias.name in _EXPORTS)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlab."):
            base = node.module.removeprefix("attnlab.")
            # `from attnlab.engine import models` names a module; `from attnlab.engine.models
            # import load_classifier` a name in one
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if module_file(f"{base}.{alias.name}").exists()
                          else base)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("attnlab.") for a in node.names
                         if a.name.startswith("attnlab."))
    return frozenset(name for name in found if module_file(name).exists())


# The rules' params (attnlab.rule_params, which the job object imports for jobs outside the
# workflow) are no code a rule's job runs: Snakemake compares the params themselves, so an edit
# there reruns the rules whose params it changes, not every rule.
NOT_RUN_BY_JOBS = frozenset({"rule_params"})


def code_closure(*modules: str) -> set[str]:
    """The named library modules and every attnlab module they import, directly or not (but
    through the rules' params, `NOT_RUN_BY_JOBS`)."""
    todo = list(modules)
    closure: set[str] = set()
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        if not module_file(name).exists():
            raise ValueError(f"code_version: no module attnlab.{name}")
        closure.add(name)
        todo.extend(attnlab_imports(name) - NOT_RUN_BY_JOBS)
    return closure


def code_version(*modules: str) -> str:
    """A short hash of the source of the named library modules and every attnlab module they
    import, directly or not (of the whole library when none is named)."""
    closure = code_closure(*modules) if modules else library_modules()
    digest = hashlib.sha256()
    for name in sorted(closure):
        digest.update(name.encode() + b"\0" + module_file(name).read_bytes())
    return digest.hexdigest()[:12]
