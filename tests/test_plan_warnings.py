"""The dry run's warnings: no GPU (with the plan's estimated CPU time) and a hub that cannot
serve the configuration's ids, as functions and through the real `snakemake -n`."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from test_workflow import ROOT, job_counts, snakemake

from attnlab.plumbing import plan_warnings
from attnlab.plumbing.config import load_config

DEFAULT = load_config(ROOT / "config.yaml")
REAL = load_config(ROOT / "config" / "real.yaml")  # a hub model and two hub datasets
REAL_IDS = [("model", "sentence-transformers/all-MiniLM-L6-v2"),
            ("dataset", "cornell-movie-review-data/rotten_tomatoes"),
            ("dataset", "stanfordnlp/imdb")]


@pytest.mark.parametrize(("environ", "visible"), [
    ({"CUDA_VISIBLE_DEVICES": ""}, False), ({"CUDA_VISIBLE_DEVICES": "-1"}, False)])
def test_hidden_devices_are_no_gpu(environ, visible):
    assert plan_warnings.gpu_visible(environ) is visible


def test_no_gpu_warns_with_the_plan_s_cpu_time_from_the_per_rule_times():
    jobs = {"finetune": 3, "attribute": 6, "pretrain": 1}
    line = plan_warnings.no_gpu_warning(DEFAULT, jobs, gpu=False)
    # 3 x 49 s + 6 x 8.7 s = 199 s: about 3 CPU-minutes; pretrain has no time of its own
    assert "the plan's 10 jobs, all of them, are estimated at about 3 CPU-minutes" in line
    assert "pretrain not counted" in line and "\n" not in line
    assert plan_warnings.no_gpu_warning(DEFAULT, jobs, gpu=True) is None
    on_cpu = {**DEFAULT, "device": "cpu"}  # asked for: nothing to warn about
    assert plan_warnings.no_gpu_warning(on_cpu, jobs, gpu=False) is None
    # the per-rule times are the tiny scratch model's: no number for a pretrained one
    assert "no estimate" in plan_warnings.no_gpu_warning(REAL, jobs, gpu=False)


def test_every_rule_with_jobs_has_its_time():
    rules = {m for path in (ROOT / "workflow" / "rules").glob("*.smk")
             for m in re.findall(r"^ *rule (\w+):", path.read_text(), re.M)}
    timed = set(plan_warnings.DEFAULT_RUN_SECONDS)
    # the downloads, the pre-training (config/real.yaml, model.pretrain), the report's pages and
    # the induction stages of next-token configurations: none runs in the default run
    assert rules - timed == {"download_data", "download_model", "pretrain", "run_summary",
                             "claims", "figures", "induction", "induction_heads"}
    assert timed <= rules


def test_the_hub_ids_are_those_not_downloaded_yet():
    assert plan_warnings.hub_ids(DEFAULT) == []
    assert plan_warnings.hub_ids(REAL, exists=lambda path: False) == REAL_IDS
    # the model's folder and the datasets' splits are there: nothing to fetch
    assert plan_warnings.hub_ids(REAL, exists=lambda path: True) == []


def test_the_hub_off_unreachable_or_without_an_id_is_one_line_each():
    missing = {"exists": lambda path: False}
    off = plan_warnings.hub_warnings(REAL, {"HF_HUB_OFFLINE": "1"}, **missing,
                                     reach=pytest.fail)  # off: never asked
    assert off == [
        "warning: the hub is off (HF_HUB_OFFLINE=1): model sentence-transformers/"
        "all-MiniLM-L6-v2, dataset cornell-movie-review-data/rotten_tomatoes, dataset "
        "stanfordnlp/imdb will be taken from a packaged copy where there is one, or the "
        "download stops"]
    asked = []

    def refused(url):
        asked.append(url)
        return "ConnectionRefusedError: [Errno 111] Connection refused"

    down = plan_warnings.hub_warnings(REAL, {"HF_ENDPOINT": "http://127.0.0.1:9"}, **missing,
                                      reach=refused)
    # one probe tells that the host is down; one line names every id
    assert asked == ["http://127.0.0.1:9/api/models/sentence-transformers/all-MiniLM-L6-v2"]
    assert len(down) == 1 and down[0].startswith(
        "warning: the hub cannot be reached (http://127.0.0.1:9: ConnectionRefusedError")
    assert all(name in down[0] for _, name in REAL_IDS)
    # the host answers, but not for one id
    gone = plan_warnings.hub_warnings(
        REAL, {}, **missing, reach=lambda url: "HTTP 404" if "imdb" in url else None)
    assert gone == ["warning: the hub does not serve dataset stanfordnlp/imdb "
                    "(https://huggingface.co: HTTP 404); its download will take a packaged "
                    "copy where there is one, or stop"]
    assert plan_warnings.hub_warnings(REAL, {}, exists=lambda path: True, reach=pytest.fail) == []


def warnings_of(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


def test_the_dry_run_warns_of_no_gpu_with_its_jobs_and_their_estimate():
    # CUDA_VISIBLE_DEVICES="": no GPU, whatever this machine has; --forceall: the whole plan,
    # as the estimate counts it, also where `make run` has finished it in this checkout
    result = snakemake("-n", "--forceall", "--cores", "2", env={"CUDA_VISIBLE_DEVICES": ""})
    jobs = job_counts(result.stdout)
    # the estimate counts the jobs the dry run plans, but the report's pages and the target
    for rule in ("run_summary", "claims", "figures", "all"):
        jobs.pop(rule)
    seconds, unknown = plan_warnings.cpu_estimate(jobs)
    assert unknown == [] and seconds > 0
    assert warnings_of(result) == [
        f"warning: no GPU found: the model jobs run on the CPU; the plan's {sum(jobs.values())} "
        f"jobs, all of them, are estimated at about {seconds / 60:.0f} CPU-minutes (the default "
        "run's time per job of each rule on a 2-core CPU, for models and tasks of the default's "
        "size; docs/running.md)"]


def test_the_dry_run_warns_that_the_hub_is_off_or_unreachable(tmp_path):
    config = copy.deepcopy(yaml.safe_load((ROOT / "config" / "real.yaml").read_text()))
    configfile = tmp_path / "real.yaml"
    configfile.write_text(yaml.safe_dump(config))
    args = ("-n", "--cores", "1", "--configfile", str(configfile), "--directory", str(tmp_path))
    off = warnings_of(snakemake(*args, env={"CUDA_VISIBLE_DEVICES": ""}))
    assert len(off) == 2 and "no estimate" in off[0]
    assert off[1].startswith("warning: the hub is off (HF_HUB_OFFLINE=1): model "
                             "sentence-transformers/all-MiniLM-L6-v2, dataset")
    # the hub on, at an address where nothing listens (refused at once)
    down = warnings_of(snakemake(*args, env={"HF_HUB_OFFLINE": "", "HF_ENDPOINT":
                                             "http://127.0.0.1:9", "CUDA_VISIBLE_DEVICES": ""}))
    assert len(down) == 2 and down[1].startswith(
        "warning: the hub cannot be reached (http://127.0.0.1:9: ")
