"""The keys of the config's `attribution` section that the attribution engine reads: the keyword
arguments of `attnlab.engine.attribution.attribute`, under the config's names. They live apart
from the engine so that the workflow reads them when it builds its DAG without importing torch
(`ENGINE` in attnlab.rule_params, the params of every attributing rule)."""

ENGINE_KEYS = ("quadrature", "steps", "tolerance", "max_steps", "scan_steps", "batch_size",
               "score")
