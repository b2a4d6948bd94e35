"""Snakemake adapter of rule trees: the attribution tree of every attributed dev example."""

from attnlab.analyses.information_flow import trees_stage
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.outputs import provenance, workflow_job

with workflow_job(snakemake):
    params = snakemake.params
    trees_stage(
        snakemake.input.parts,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        trees_cfg=params.trees,
        seed=params.seed,
        out=dict(snakemake.output.items()),
        provenance=provenance(dict(params.items())),
    )
