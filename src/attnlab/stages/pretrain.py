"""Rule pretrain (model.pretrain): the shared starting point every task's scratch model is
fine-tuned from, one vocabulary and one masked-LM model over all tasks' training text."""

from __future__ import annotations

from attnlab.data.tasks import TaskSpec, load_split
from attnlab.engine import training
from attnlab.model_job import ModelJob


def run(job: ModelJob) -> None:
    """Writes the masked-LM model with its tokenizer into the folder `model`, and its metrics
    (JSON)."""
    device = job.device
    # the training split of every task, in the order of the settings' tasks (input `train`)
    specs = [TaskSpec.from_config(name, columns) for name, columns in job.settings.tasks.items()]
    trains = [load_split(path, spec) for path, spec in zip(job.paths("train"), specs, strict=True)]
    trained = training.pretrain(trains, specs=specs, model_cfg=job.settings.model,
                                pretrain_cfg=job.settings.model.pretrain, device=device,
                                seed=job.settings.seed)
    trained.save(job.outputs["model"])
    job.write_json("metrics", trained.metrics)
