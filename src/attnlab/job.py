"""The job a workflow rule runs, as one object a stage takes.

A rule's script builds it once from Snakemake's `snakemake` object and hands it to the stage
module named after the rule (`attnlab.stages.<rule>.run`): its named inputs and outputs, its
params as `Settings` (the config sections the rule reads: what reruns it when they change),
its wildcards, threads and log. The library and the tests run a stage without Snakemake by
building the same object themselves, with the params its rule passes (`attnlab.rule_params`,
which the rules read too, so a stage reading a key its rule does not pass fails there too):

    job = Job.from_config("trees", load_config("config.yaml"), task="syn_sst2",
                          inputs={"parts": [...]}, outputs={"trees": ..., ...})
    stages.trees.run(job)

`Job` reads and writes tables only, so the jobs of table-only rules start without torch;
`attnlab.model_job.ModelJob` adds the device and the task's model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from attnlab.data.prompts import PromptSpec
from attnlab.data.tasks import TaskSpec, load_split
from attnlab.plumbing.outputs import provenance, workflow_job, write_json, write_task_tables
from attnlab.plumbing.settings import Settings
from attnlab.rule_params import rule_params


def _paths(value: Any) -> str | list[str]:
    """A named input or output of Snakemake's: one path, or a list of them."""
    return str(value) if isinstance(value, str | os.PathLike) else [str(v) for v in value]


@dataclass(frozen=True)
class Job:
    """One job of a rule: its named inputs and outputs (paths), its settings (the rule's params),
    wildcards, threads and log file."""

    rule: str
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    settings: Settings
    wildcards: Mapping[str, str] = field(default_factory=dict)
    threads: int = 1
    log: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.settings, Settings):
            object.__setattr__(self, "settings", Settings(self.settings))

    @classmethod
    def from_snakemake(cls, smk: Any) -> Job:
        """The job of a rule's script, from its `snakemake` object (named inputs and outputs)."""
        return cls(
            rule=smk.rule,
            inputs={name: _paths(value) for name, value in smk.input.items()},
            outputs={name: _paths(value) for name, value in smk.output.items()},
            settings=Settings(dict(smk.params.items())),
            wildcards=dict(smk.wildcards.items()),
            threads=smk.threads,
            log=smk.log[0] if smk.log else None,
        )

    @classmethod
    def from_config(cls, rule: str, config: Mapping[str, Any], *, inputs: Mapping[str, Any],
                    outputs: Mapping[str, Any], task: str | None = None,
                    seed: int | None = None, threads: int = 1) -> Job:
        """A job outside Snakemake (the library, the tests): its settings are the params of
        `rule` as the workflow passes them for the validated `config`, the task `task` and the
        run's seed `seed` (config `seed` unless given): `rule_params`."""
        return cls(rule=rule, inputs=inputs, outputs=outputs,
                   settings=rule_params(rule, config, task=task, seed=seed),
                   wildcards={} if task is None else {"task": task}, threads=threads)

    @classmethod
    def run_rule(cls, smk: Any, stage: Callable[[Job], Any]) -> None:
        """What a rule's script does: build the job and run its stage inside
        `attnlab.plumbing.outputs.workflow_job` (log, input checks, one-line errors, output
        records)."""
        job = cls.from_snakemake(smk)
        with workflow_job(smk):
            stage(job)

    @property
    def task(self) -> str:
        return self.wildcards["task"]

    @property
    def next_token(self) -> bool:
        """Whether the job's task is a next-token task (a decoder language model's)."""
        return self.settings.get("task", {}).get("kind") == "next_token"

    @cached_property
    def spec(self) -> TaskSpec | PromptSpec:
        """The task's columns and class names (params `task`); a next-token task's prompt and
        target columns."""
        if self.next_token:
            return PromptSpec.from_config(self.task, self.settings.task)
        return TaskSpec.from_config(self.task, self.settings.task)

    @cached_property
    def provenance(self) -> dict[str, Any]:
        """The settings, code version and packages every output of the job records."""
        return provenance(self.settings.to_dict())

    def paths(self, name: str) -> list[str]:
        """The input `name` as a list of paths, whether Snakemake gave one path or several."""
        value = _paths(self.inputs[name])
        return [value] if isinstance(value, str) else value

    @cached_property
    def finetune_metrics(self) -> dict[str, dict[str, Any]]:
        """Task -> fine-tuning's metrics of the models the job's findings are measured on
        (input `finetune_metrics`: results/<name>/finetune/<task>/metrics.json), for
        `attnlab.analyses.claims.on_models`."""
        return {Path(path).parent.name: json.loads(Path(path).read_text())
                for path in self.paths("finetune_metrics")}

    def split(self, name: str = "dev") -> pd.DataFrame:
        """A prepared split of the task (input `name`), checked against its columns."""
        return load_split(self.inputs[name], self.spec)

    def write_tables(self, tables: Mapping[str, pd.DataFrame],
                     meta: Mapping[str, Any] | None = None) -> None:
        """Each table to the output of its name (Parquet, with the task as first column and the
        job's provenance, and `meta` beside it)."""
        write_task_tables(self.task, dict(tables), self.outputs,
                          {**self.provenance, **(meta or {})})

    def write_json(self, name: str, summary: Mapping[str, Any]) -> None:
        """`summary` with the job's provenance to the output `name`."""
        write_json(self.outputs[name], {**summary, **self.provenance})
