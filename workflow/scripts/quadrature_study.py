"""Snakemake adapter of rule quadrature_study: every quadrature rule against a converged
reference, on each task's trained model."""

from attnlab.analyses.quadrature_study import plot_study, study
from attnlab.data.tasks import TaskSpec
from attnlab.plumbing.device import start_model_job
from attnlab.plumbing.outputs import provenance, workflow_job, write_json

params = snakemake.params
with workflow_job(snakemake):
    device, _ = start_model_job(snakemake.threads, params.device, params.precision)
    reports = {
        task: study(model, dev, spec=TaskSpec.from_config(task, params.tasks[task]),
                    attribution_cfg=params.attribution, model_cfg=params.model,
                    examples=params.attribution["study_examples"], device=device)
        for task, model, dev in zip(params.tasks, snakemake.input.models, snakemake.input.devs,
                                    strict=True)
    }
    plot_study(reports, snakemake.output.figure)
    write_json(snakemake.output.study, {"tasks": reports, **provenance(dict(params.items()))})
