"""Snakemake adapter of rule prune_eval: per-layer and global pruning of one task, and claims."""

from attnlab.analyses.pruning import prune_eval
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    prune_eval(
        snakemake.input.model,
        dev_path=snakemake.input.dev,
        dump_paths=snakemake.input.parts,
        importance_path=snakemake.input.importance,
        spec=TaskSpec.from_config(snakemake.wildcards.task, params.task),
        heads_cfg=params.heads,
        model_cfg=params.model,
        target=params.target,
        device=device,
        out={"per_layer": snakemake.output.per_layer, "global": snakemake.output.global_,
         "claims": snakemake.output.claims},
        provenance=provenance(dict(params.items())),
    )
