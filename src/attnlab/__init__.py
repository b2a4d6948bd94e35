"""attnlab: what self-attention does, measured (Hao et al. 2021; Brunner et al. 2020).

One call on raw text (docs/library.md)::

    import attnlab
    out = attnlab.explain("sentence-transformers/all-MiniLM-L6-v2", ["a gripping film"],
                          method="rollout")
    out.top(3); out.save("explained"); attnlab.Explanation.load("explained").to_html()

The public API, importable from the package itself::

    from attnlab import load_classifier, load_causal_lm, encoded_examples, attribute
    from attnlab import tree_from_matrix

and a workflow stage without Snakemake, through the job its rule's script would build::

    from attnlab import ModelJob, load_config
    from attnlab.stages import token_mixing
    token_mixing.run(ModelJob.from_config("token_mixing", load_config("config.yaml"),
                                          task="syn_sst2", inputs={...}, outputs={...}))
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Each public name and the module that defines it. They are imported on first use
# (`__getattr__`), not here: an import of any attnlab module runs this file first, and importing
# every module here would make each workflow job load all of them (matplotlib, scipy, ...).
# The rules' code hashes (`attnlab.plumbing.code_version`) follow the imports written in
# the modules, so they stay those of each rule's own modules either way.
_EXPORTS = {
    "explain": "explanation",
    "Explanation": "explanation",
    "attribute": "engine.attribution",
    "Attribution": "engine.attribution",
    "load_classifier": "engine.models",
    "load_causal_lm": "engine.models",
    "encoded_examples": "engine.examples",
    "load_config": "plumbing.config",
    "validate_config": "plumbing.config",
    "tree_from_matrix": "analyses.trees",
    "importance_table": "analyses.heads",
    "Job": "job",
    "ModelJob": "model_job",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
    return getattr(importlib.import_module(f"attnlab.{_EXPORTS[name]}"), name)
