"""The job of a rule that runs a model: `attnlab.job.Job` with its device and its task's model.

The device and precision are chosen (and logged) once, on first use, from the params `device`
and `precision`, with the job's threads; the model is loaded from the input `model` onto that
device, and splits are encoded with the params `model` (max_length, truncate).
"""

from __future__ import annotations

from functools import cached_property

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnlab.engine import examples, models
from attnlab.job import Job
from attnlab.plumbing.device import Precision, start_model_job


class ModelJob(Job):
    @cached_property
    def _started(self) -> tuple[torch.device, Precision]:
        return start_model_job(self.threads, self.settings.device, self.settings.precision)

    @property
    def device(self) -> torch.device:
        return self._started[0]

    @property
    def precision(self) -> Precision:
        return self._started[1]

    @cached_property
    def _classifier(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        if self.next_token:
            return models.load_causal_lm(self.inputs["model"], self.device)
        return models.load_classifier(self.inputs["model"], self.device)

    @property
    def model(self) -> PreTrainedModel:
        """The task's classifier (input `model`; a next-token task's decoder language model),
        on the job's device, in eval mode."""
        return self._classifier[0]

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._classifier[1]

    @cached_property
    def class_names(self) -> list[str]:
        """What a label, prediction or target index names: the task's classes; a decoder's
        tokens (its vocabulary)."""
        if self.next_token:
            return self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
        return list(self.spec.label_names)

    def encoded(self, split: str = "dev", n: int | None = None) -> dict[str, torch.Tensor]:
        """The first `n` examples (all when None) of a split, tokenized for the model
        (`examples.encoded_frame`)."""
        return examples.encoded_examples(self.inputs[split], self.spec, self.tokenizer,
                                         self.settings.model, n)
