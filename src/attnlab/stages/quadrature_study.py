"""Rule quadrature_study: accuracy against cost of every quadrature rule on each task's trained
model, against a converged reference (benchmarks/quadrature.py runs it on more examples)."""

from __future__ import annotations

from attnlab.analyses.quadrature_study import study
from attnlab.data.tasks import TaskSpec, load_split
from attnlab.engine.models import load_classifier
from attnlab.model_job import ModelJob
from attnlab.report.quadrature_figures import plot_study


def run(job: ModelJob) -> None:
    """Writes `study` (per task and rule: completeness and per-head maximum errors against the
    reference, gradient evaluations, seconds per example) and its `figure`."""
    attribution = job.settings.attribution
    reports = {}
    for task, model_dir, dev_path in zip(job.settings.tasks, job.inputs["models"],
                                         job.inputs["devs"], strict=True):
        spec = TaskSpec.from_config(task, job.settings.tasks[task])
        model, tokenizer = load_classifier(model_dir, job.device)
        dev = load_split(dev_path, spec).iloc[: attribution.study_examples]
        reports[task] = study(model, tokenizer, dev.reset_index(drop=True), spec, attribution,
                              job.settings.model, panels=attribution.study_panels)
    plot_study(reports, job.outputs["figure"])
    job.write_json("study", {"tasks": reports})
