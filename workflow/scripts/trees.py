"""Snakemake adapter of rule trees: the attribution tree of every attributed dev example."""

from attnlab.outputs import provenance, setup_logging
from attnlab.tasks import TaskSpec
from attnlab.trees import trees_stage

setup_logging(snakemake.log[0])
params = snakemake.params
trees_stage(
    snakemake.input.parts,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    params.trees,
    params.seed,
    dict(snakemake.output.items()),
    provenance(dict(params.items())),
)
