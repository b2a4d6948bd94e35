"""Snakemake adapter of rule prune_eval: per-layer and global pruning of one task, and claims."""

from attnlab.device import start_model_job
from attnlab.outputs import provenance
from attnlab.pruning import prune_eval
from attnlab.tasks import TaskSpec

params = snakemake.params
device, _ = start_model_job(snakemake.log[0], snakemake.threads, params.device,
                            params.precision)
prune_eval(
    snakemake.input.model,
    snakemake.input.dev,
    snakemake.input.parts,
    snakemake.input.importance,
    TaskSpec.from_config(snakemake.wildcards.task, params.task),
    params.heads,
    params.model,
    params.target,
    device,
    {"per_layer": snakemake.output.per_layer, "global": snakemake.output.global_,
     "claims": snakemake.output.claims},
    provenance(dict(params.items())),
)
