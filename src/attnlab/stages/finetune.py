"""Rule finetune: one task's classifier, trained (or, for a checkpoint already fine-tuned for
the task and for the untrained control, only evaluated) on its prepared splits."""

from __future__ import annotations

from attnlab.engine import training
from attnlab.model_job import ModelJob


def run(job: ModelJob) -> None:
    """Writes the classifier (a next_token task: the decoder language model) with its
    tokenizer into the folder `model`, and its metrics (JSON: dev accuracy, training loss,
    epochs, steps, device, seconds)."""
    device, precision = job.device, job.precision
    # the untrained control (config controls) is the model training would start from
    untrained = job.settings.control == "untrained"
    # the checkpoint is read from its local copy; the settings keep the name it was given
    model = {**job.settings.model, "pretrained": job.inputs["pretrained"] or None}
    if job.next_token:
        trained = training.train_language_model(
            job.split("train"), job.split("dev"), spec=job.spec, model_cfg=model,
            train_cfg=job.settings.finetune, device=device, seed=job.settings.seed,
            bf16=precision.bf16, untrained=untrained)
    else:
        trained = training.finetune(
            job.split("train"),
            job.split("dev"),
            spec=job.spec,
            model_cfg=model,
            train_cfg=job.settings.finetune,
            device=device,
            seed=job.settings.seed,
            bf16=precision.bf16,
            # the shared starting point of rule pretrain (none without model.pretrain)
            start=job.inputs["start"] or None,
            untrained=untrained,
        )
    trained.save(job.outputs["model"])
    job.write_json("metrics", trained.metrics)
