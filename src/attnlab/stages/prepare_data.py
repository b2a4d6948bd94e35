"""Rule prepare_data: one task's train and dev splits, generated or read, validated, and checked
against the model's tokenizer before any training."""

from __future__ import annotations

from attnlab.data.prompts import read_prompts, write_prompts
from attnlab.data.tasks import TaskSpec, read_task, write_task
from attnlab.data.tokenization import (
    causal_tokenizer,
    check_lengths,
    check_prompt_lengths,
    check_targets,
    length_limit,
    model_tokenizer,
)
from attnlab.job import Job


def run(job: Job) -> None:
    """Writes the splits train and dev (Parquet) and the JSON summary of their rows and label
    counts; a bad split or an example too long for the model writes nothing."""
    task = job.settings.task
    max_length, truncate = length_limit(job.settings.model)
    # the checkpoint's tokenizer is read from its local copy (none for a scratch model)
    model = {**job.settings.model, "pretrained": job.inputs["pretrained"] or None}
    # the downloaded files of a hub task, the prepared splits of a mixed task's tasks (a local
    # task's files are named in its config)
    files = {name: path for name, path in job.inputs.items() if name != "pretrained"}
    if task.get("kind") == "next_token":  # prompts and targets, never truncated
        spec, train, dev, origins = read_prompts(job.task, task, job.settings.seed, files)
        tokenizer = causal_tokenizer(spec, model, train)
        for split, origin in zip((train, dev), origins, strict=True):
            check_prompt_lengths(split, spec, tokenizer, max_length, origin)
            # a user's targets (a generated prompt's target is one word, of which the
            # induction protocol predicts the first token)
            if task["source"] == "local" and "repeat" not in task:
                check_targets(split, spec, tokenizer, origin,
                              first_token=task.get("target_tokens") == "first")
        job.write_json("summary", write_prompts(train=train, dev=dev,
                                                train_out=job.outputs["train"],
                                                dev_out=job.outputs["dev"]))
        return
    # the tasks a mixed task takes its examples from, by name
    parts = {name: TaskSpec.from_config(name, spec) for name, spec in job.settings.parts.items()}
    spec, train, dev, origins = read_task(job.task, task, job.settings.seed, files, parts)
    if not truncate:  # an example too long for the model stops the run here, before training
        tokenizer = model_tokenizer(spec, model, train)
        for split, origin in zip((train, dev), origins, strict=True):
            check_lengths(split, spec, tokenizer, max_length, origin)
    summary = write_task(spec, train=train, dev=dev, train_out=job.outputs["train"],
                         dev_out=job.outputs["dev"])
    job.write_json("summary", summary)
