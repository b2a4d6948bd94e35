"""The job object a rule's script builds and its stage takes, and the settings it carries."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from conftest import DEFAULT_CONFIG
from snakemake.iocontainers import InputFiles, Log, OutputFiles, Params, Wildcards
from test_dumps import CFG, random_result

from attnlab import Job, ModelJob, rule_params
from attnlab.data.dumps import write_dump
from attnlab.engine.dump_rows import example_row
from attnlab.plumbing.errors import AttnlabError
from attnlab.plumbing.settings import Settings
from attnlab.stages import trees


def test_settings_read_config_keys_as_attributes_and_refuse_the_ones_not_given():
    settings = Settings({"trees": {"tau": 0.4, "example_idx": [3, 5]}, "seed": 7})
    assert settings.trees.tau == 0.4 and settings.seed == 7
    assert settings.trees.example_idx == (3, 5)  # read-only all the way down
    assert settings["trees"]["tau"] == 0.4 and dict(settings.trees) == {"tau": 0.4,
                                                                          "example_idx": (3, 5)}
    with pytest.raises(AttnlabError, match=r"setting trees.normalise was not given to this job "
                                           r"\(it has: tau, example_idx\)"):
        _ = settings.trees.normalise
    with pytest.raises(TypeError):
        settings.trees["tau"] = 0.5  # no item assignment on a Mapping
    assert settings.to_dict() == {"trees": {"tau": 0.4, "example_idx": [3, 5]}, "seed": 7}


def test_a_job_is_frozen():
    job = Job(rule="trees", inputs={}, outputs={}, settings={"seed": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.rule = "attribute"


def test_a_job_from_a_config_has_its_task_and_the_task_s_finetune_overrides():
    config = {**DEFAULT_CONFIG, "tasks": {
        "t": {**DEFAULT_CONFIG["tasks"]["syn_sst2"], "finetune": {"epochs": 3}}}}
    job = Job.from_config("finetune", config, task="t", seed=5, inputs={}, outputs={})
    assert job.task == "t" and job.settings.seed == 5
    assert job.spec.label_names == tuple(config["tasks"]["t"]["label_names"])
    assert job.settings.finetune.epochs == 3
    assert job.settings.finetune.learning_rate == DEFAULT_CONFIG["finetune"]["learning_rate"]
    assert Job.from_config("trees", config, task="t", inputs={}, outputs={}).settings.seed == \
        DEFAULT_CONFIG["seed"]


def test_a_job_from_a_config_has_the_params_its_rule_passes_and_no_other_setting():
    settings = Job.from_config("trees", DEFAULT_CONFIG, task="syn_sst2", inputs={},
                               outputs={}).settings
    assert set(settings) == {"trees", "task", "seed", "code"}
    assert set(settings.trees) == {"tau", "normalise", "examples", "example_idx"}
    assert set(settings.task) == {"text_fields", "label_names", "label_field"}  # task_spec's
    with pytest.raises(AttnlabError, match=r"^setting attribution was not given to this job "
                                           r"\(it has: trees, task, seed, code\)$"):
        _ = settings.attribution
    with pytest.raises(AttnlabError, match=r"^rule trees: its params need the wildcard task$"):
        Job.from_config("trees", DEFAULT_CONFIG, inputs={}, outputs={})


def test_a_job_of_a_rule_there_is_not_fails_in_one_line():
    with pytest.raises(AttnlabError, match=r"^no rule tree \(attnlab.rule_params\)$"):
        Job.from_config("tree", DEFAULT_CONFIG, task="syn_sst2", inputs={}, outputs={})


def test_a_stage_reading_a_key_its_rule_does_not_pass_fails_in_one_line(tmp_path, monkeypatch):
    passed = rule_params.PARAMS_OF["trees"]

    def forgetful(params: rule_params.RuleParams) -> dict:
        settings = passed(params)
        del settings["trees"]["examples"]  # the rule forgets a key
        return settings

    monkeypatch.setitem(rule_params.PARAMS_OF, "trees", forgetful)
    result = random_result(n_examples=1, layers=2, heads=2, width=5, real=(5,))
    row = {**example_row(result, 0, CFG), "idx": 0, "label": 0, "tokens": ["w"] * 5,
           "segments": [0] * 5, "planted_i": None, "planted_j": None}
    write_dump([row], tmp_path / "part.parquet", {"shard": 0, "n_shards": 1, "n_layers": 2,
                                                  "n_heads": 2})
    job = Job.from_config("trees", DEFAULT_CONFIG, task="syn_sst2",
                          inputs={"parts": [tmp_path / "part.parquet"]},
                          outputs={name: tmp_path / "out" / name for name in
                                   ("edges", "trees", "claims", "summary", "sizes", "figures")})
    with pytest.raises(AttnlabError) as failed:
        trees.run(job)
    assert str(failed.value) == ("setting trees.examples was not given to this job "
                                 "(it has: tau, normalise, example_idx)")


def test_a_job_from_snakemake_takes_the_named_inputs_outputs_params_and_wildcards():
    inputs = InputFiles(["m", "a.parquet", "b.parquet"])
    inputs._set_name("model", 0)
    inputs._set_name("parts", 1, 3)
    outputs = OutputFiles(["claims.parquet"])
    outputs._set_name("claims", 0)
    params = Params([{"tau": 0.4}, 3])
    params._set_name("trees", 0)
    params._set_name("seed", 1)
    wildcards = Wildcards(["syn_sst2"])
    wildcards._set_name("task", 0)
    smk = SimpleNamespace(rule="trees", input=inputs, output=outputs, params=params,
                          wildcards=wildcards, threads=2, log=Log(["trees.log"]))
    job = ModelJob.from_snakemake(smk)
    assert isinstance(job, ModelJob)
    assert job.inputs == {"model": "m", "parts": ["a.parquet", "b.parquet"]}
    assert job.paths("model") == ["m"] and job.paths("parts") == ["a.parquet", "b.parquet"]
    assert job.outputs == {"claims": "claims.parquet"}
    assert job.settings.trees.tau == 0.4 and job.settings.seed == 3
    assert (job.task, job.threads, job.log) == ("syn_sst2", 2, "trees.log")
