"""Snakemake adapter of rule prune_eval: per-layer and global pruning of one task, and claims."""

from attnlab.device import start_model_job
from attnlab.outputs import provenance, workflow_job
from attnlab.pruning import prune_eval
from attnlab.tasks import TaskSpec

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
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
