import re
from pathlib import Path

import jsonschema
import yaml
from jsonschema import Draft202012Validator
from snakemake.exceptions import WorkflowError

from attnlab.outputs import code_version

# YAML 1.1 (PyYAML, Snakemake) reads 2e-5 as a string; 2.0e-5 is a float.
EXPONENT_WITHOUT_POINT = re.compile(r"[-+]?[0-9]+[eE][-+]?[0-9]+")
# Bounds of a number in the schema, as they read in an error message.
BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def _filling_defaults(validator_class):
    """The validator class extended to fill `default:` values, as snakemake.utils.validate does."""
    check_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(key, subschema["default"])
        yield from check_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": properties})


def _explain(error):
    """One line naming the key, the value and what the schema allows there."""
    where = ".".join(map(str, error.absolute_path))
    if error.validator == "additionalProperties" and "properties" in error.schema:
        allowed = sorted(error.schema["properties"])
        unknown = ", ".join(repr(key) for key in error.instance if key not in allowed)
        return (f"config error at {where or 'top level'}: unknown key {unknown} "
                f"(allowed here: {', '.join(allowed)})")
    message = error.message
    if error.validator in BOUNDS:
        allowed = " and ".join(f"{op} {error.schema[k]}" for k, op in BOUNDS.items() if k in error.schema)
        message = f"{error.instance!r} is out of range (allowed: {allowed})"
    elif error.validator == "type" and EXPONENT_WITHOUT_POINT.fullmatch(str(error.instance)):
        message += " (YAML reads a number like 2e-5 as text: write 2.0e-5)"
    return f"config error at {where or 'top level'}: {message}"


def validate_config(config, schema_path):
    """Check `config` against the schema, filling in its defaults; fail with one clear line.

    snakemake.utils.validate does the same but reports an error with the whole sub-schema
    attached; here the message names the key and the allowed values, and nothing else.
    """
    with open(schema_path) as f:
        schema = yaml.safe_load(f)
    validator = _filling_defaults(Draft202012Validator)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        raise WorkflowError(_explain(error))


validate_config(config, Path(workflow.basedir, "workflow/schemas/config.schema.yaml"))

TASKS = list(config["tasks"])
SHARDS = range(config["attribution"]["shards"])
# Rules that run a model declare `gpu=GPU`: one GPU is requested (from SLURM, or from the
# local `gpu` limit of profiles/default) unless the config pins the CPU. Memory and run time
# depend on the scale of the configuration and the machine, so they live in the profiles.
GPU = 0 if config["device"] == "cpu" else 1

# Outputs are results/{name}/...: only this configuration's name matches, so nothing is ever
# built under another name with this configuration's settings.
wildcard_constraints:
    name=re.escape(config["name"]),
    task="|".join(TASKS),
    shard=r"\d+",


def task_data(wildcards):
    """A task's data settings; its finetune overrides go to the finetune rule only."""
    return {k: v for k, v in config["tasks"][wildcards.task].items() if k != "finetune"}


def task_finetune(wildcards):
    """The finetune settings of a task: the top-level ones with the task's overrides."""
    return {**config["finetune"], **config["tasks"][wildcards.task].get("finetune", {})}
