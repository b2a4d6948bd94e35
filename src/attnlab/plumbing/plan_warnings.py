"""What the dry run warns about, one line each, before any job runs: no GPU on this machine (with
an estimate of the plan's CPU time), and a hub that cannot serve the model or dataset ids the
configuration names. Unlike `attnlab.plumbing.preflight`'s errors, neither stops the run: the
jobs then run on the CPU, and a download the hub cannot serve takes its packaged copy or stops
in one line (attnlab.data.hub).

Like preflight, this module imports neither torch nor transformers: Snakemake imports it
whenever it builds the DAG, so the GPU is looked for by its device files, not through torch.
"""

from __future__ import annotations

import glob
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attnlab.plumbing.preflight import HUB_ID, hub_file

# Seconds one job of each rule took in the default run (config.yaml: three synthetic tasks of
# 5,000 training examples, the 4-layer scratch model, one thread per job) on a 2-core CPU
# machine without GPU, from that run's `benchmark:` files (results/default/benchmarks/), rounded.
# The estimate is theirs times the jobs of each rule: a model of another size, or tasks of
# another size, take more or less. docs/running.md says how to read it.
DEFAULT_RUN_SECONDS = {
    "prepare_data": 3.3, "finetune": 49, "attribute": 8.7, "summarise_attributions": 1.2,
    "quadrature_study": 29, "head_importance": 6.5, "prune_eval": 11, "pruning_figures": 2.8,
    "task_correlation": 2.2, "trees": 2.0, "example_views": 9.3, "mine_triggers": 13,
    "attack_eval": 10, "effective_attention": 8.1, "token_identifiability": 11,
    "token_mixing": 8.6, "attention_permutation": 12, "adversarial_attention": 12,
    "interaction_methods": 27,
}
# Connecting to the hub: a dry run waits at most this long per id.
HUB_TIMEOUT_S = 5.0


def gpu_visible(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this machine shows an NVIDIA GPU to its processes: a device file /dev/nvidia<n>,
    unless CUDA_VISIBLE_DEVICES hides every device (empty or -1)."""
    hidden = environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def cpu_estimate(jobs: Mapping[str, int]) -> tuple[float, list[str]]:
    """The plan's CPU seconds by DEFAULT_RUN_SECONDS for `jobs` (jobs per rule), and the rules
    with jobs it has no time for."""
    seconds = sum(DEFAULT_RUN_SECONDS[rule] * n for rule, n in jobs.items()
                  if rule in DEFAULT_RUN_SECONDS)
    return seconds, sorted(rule for rule, n in jobs.items()
                           if n and rule not in DEFAULT_RUN_SECONDS)


def no_gpu_warning(config: Mapping[str, Any], jobs: Mapping[str, int], *,
                   gpu: bool) -> str | None:
    """The warning of a configuration whose model jobs would run on this machine's CPU: with
    the plan's estimated CPU time where its model is built from scratch (the per-rule times are
    those of the default's scratch model); None with a GPU, or when device asks for the CPU."""
    if gpu or config["device"] == "cpu":
        return None
    head = "warning: no GPU found: the model jobs run on the CPU"
    if config["model"]["source"] != "scratch":
        return (f"{head}; a pretrained model takes far longer there than the default's tiny "
                "one (no estimate; docs/gpu.md)")
    seconds, unknown = cpu_estimate(jobs)
    total = sum(jobs.values())
    extra = f"; {', '.join(unknown)} not counted" if unknown else ""
    return (f"{head}; the plan's {total} jobs, all of them, are estimated at about "
            f"{seconds / 60:.0f} CPU-minutes (the default run's time per job of each rule on a "
            f"2-core CPU, for models and tasks of the default's size{extra}; docs/running.md)")


def hub_ids(config: Mapping[str, Any], exists: Callable[[str], bool] = os.path.exists
            ) -> list[tuple[str, str]]:
    """The (kind, id) of the hub models and datasets the configuration names whose local copy
    (resources/) is not there yet: kind "model" or "dataset"."""
    ids = []
    model = config["model"]
    pretrained = model.get("pretrained")
    if (model["source"] != "scratch" and pretrained and not Path(pretrained).is_dir()
            and re.fullmatch(HUB_ID, pretrained)
            and not exists(f"resources/models/{pretrained}")):
        ids.append(("model", pretrained))
    for task in config["tasks"].values():
        if task["source"] != "hub":
            continue
        hub = task["hub"]
        splits = [s for s in (hub["train_split"], hub["dev_split"]) if s is not None]
        if not all(exists(hub_file(hub, split)) for split in splits):
            ids.append(("dataset", hub["path"]))
    return list(dict.fromkeys(ids))


def _reach(url: str) -> str | None:
    """Why `url` cannot be had (None when it answers)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"),
                                    timeout=HUB_TIMEOUT_S):
            return None
    except urllib.error.HTTPError as err:
        return f"HTTP {err.code}"
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        return f"{type(reason).__name__}: {reason}"


def hub_warnings(config: Mapping[str, Any], environ: Mapping[str, str] = os.environ,
                 exists: Callable[[str], bool] = os.path.exists,
                 reach: Callable[[str], str | None] = _reach) -> list[str]:
    """One line per hub id the run would download that the hub cannot serve now; with
    HF_HUB_OFFLINE set, one line saying the hub is off. A download that fails takes the id's
    packaged copy where there is one (attnlab.data.packages) or stops the run in one line."""
    wanted = hub_ids(config, exists)
    if not wanted:
        return []
    if environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        names = ", ".join(f"{kind} {name}" for kind, name in wanted)
        return [f"warning: the hub is off (HF_HUB_OFFLINE={environ['HF_HUB_OFFLINE']}): "
                f"{names} will be taken from a packaged copy where there is one, or the "
                "download stops"]
    endpoint = environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    lines = []
    for kind, name in wanted:
        why = reach(f"{endpoint}/api/{kind}s/{name}")
        if why is None:
            continue
        if not why.startswith("HTTP"):  # the host itself cannot be reached: one line for all
            names = ", ".join(f"{k} {n}" for k, n in wanted)
            return [f"warning: the hub cannot be reached ({endpoint}: {why}): {names} will be "
                    "taken from a packaged copy where there is one, or the download stops"]
        lines.append(f"warning: the hub does not serve {kind} {name} ({endpoint}: {why}); its "
                     "download will take a packaged copy where there is one, or stop")
    return lines
