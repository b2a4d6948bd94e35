"""The configuration of a run: checked against the workflow's schema, its defaults filled in.

The workflow (workflow/rules/common.smk), the tests and the benchmarks all read a config
through `validate_config`, so they get the same defaults and the same one-line errors.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema import Draft202012Validator

from attnlab.plumbing.errors import ConfigError, stop

# Package data beside this module: an installed wheel and a checkout (the Snakefile puts src/
# on the path) read the same file.
SCHEMA = Path(__file__).resolve().with_name("config.schema.yaml")
# YAML 1.1 (PyYAML, Snakemake) reads 2e-5 as a string; 2.0e-5 is a float.
EXPONENT_WITHOUT_POINT = re.compile(r"[-+]?[0-9]+[eE][-+]?[0-9]+")
# Bounds of a number in the schema, as they read in an error message.
BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def _filling_defaults(validator_class: type) -> type:
    """The validator class extended to fill `default:` values, as snakemake.utils.validate does."""
    check_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(key, subschema["default"])
        yield from check_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": properties})


def _explain(error: jsonschema.ValidationError) -> str:
    """One line naming the key, the value and what the schema allows there."""
    where = ".".join(map(str, error.absolute_path))
    if error.validator == "additionalProperties" and "properties" in error.schema:
        allowed = sorted(error.schema["properties"])
        unknown = ", ".join(repr(key) for key in error.instance if key not in allowed)
        return f"{where or 'top level'}: unknown key {unknown} (allowed here: {', '.join(allowed)})"
    message = error.message
    if error.validator in BOUNDS:
        allowed = " and ".join(f"{op} {error.schema[k]}" for k, op in BOUNDS.items()
                               if k in error.schema)
        message = f"{error.instance!r} is out of range (allowed: {allowed})"
    elif error.validator == "type" and EXPONENT_WITHOUT_POINT.fullmatch(str(error.instance)):
        message += " (YAML reads a number like 2e-5 as text: write 2.0e-5)"
    return f"{where or 'top level'}: {message}"


def load_schema() -> dict[str, Any]:
    """The config's schema: the schema file, with what the method registry decides filled in
    (`with_methods`)."""
    return with_methods(yaml.safe_load(SCHEMA.read_text()))


def with_methods(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the names of the token-interaction methods of attnlab.methods.registry,
    in its order, as the values interaction_methods.methods allows and its default (every
    method), so that a method is its module and its registry entry, nothing more.

    The registry is a layer above this one (docs/design.md): it is imported by name, not by an
    import statement, so that no rule's code version follows it from here. None needs to: a
    rule reads the names as its params' values, which rerun it when they change. The registry
    imports no torch, so the workflow plans its jobs without it."""
    registry = importlib.import_module("attnlab.methods.registry")
    names = [method.name for method in registry.METHODS]
    methods = schema["properties"]["interaction_methods"]["properties"]["methods"]
    methods["items"]["enum"] = names
    methods["default"] = list(names)
    return schema


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Check `config` against the schema, filling in its defaults (in place); fail with one
    clear line (`ConfigError`). Returns `config`.

    snakemake.utils.validate does the same but reports an error with the whole sub-schema
    attached; here the message names the key and the allowed values, and nothing else.
    """
    schema = load_schema()
    validator = _filling_defaults(Draft202012Validator)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        raise ConfigError(_explain(error))
    return config


def section_defaults(section: str) -> dict[str, Any]:
    """Config section `section` as the schema's defaults fill it where a config leaves it out
    (the settings `attnlab explain` runs with)."""
    schema = load_schema()
    # the section's own schema, with the definitions its references point to
    section_schema = {**schema["properties"][section], "$defs": schema.get("$defs", {})}
    filled: dict[str, Any] = {}
    _filling_defaults(Draft202012Validator)(section_schema).validate(filled)
    return filled


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The mapping in the YAML file `path`, or a `ConfigError` naming the file (and the line of
    a syntax error) — Snakemake itself reports these with a traceback or without the line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror})") from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "not valid YAML"
        raise ConfigError(f"{path}{where}: {problem}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: holds no mapping of config keys")
    return config


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """A config file, validated and with its defaults filled in (`validate_config`)."""
    return validate_config(read_config_file(path))


if __name__ == "__main__":
    # `python -m attnlab.plumbing.config FILE`: make run checks its config file before
    # Snakemake reads it
    try:
        read_config_file(sys.argv[1])
    except ConfigError as err:
        stop(err, "config error in ")
