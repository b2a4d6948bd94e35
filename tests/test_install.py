"""The library installs on its own: the built wheel, in a fresh virtual environment with the
versions of constraints.txt and none of the workflow's packages, validates a config against its
packaged schema, builds a rule's job from it (its params from the package, not the rule
files), and explains sentences on the packaged MiniLM and a prompt on a tiny GGUF decoder,
from outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_gguf import tiny_llama, write_gguf

from attnlab.data.packages import MINILM, MODELS

ROOT = Path(__file__).resolve().parents[1]
MINILM_ID = next(model for model, package in MODELS.items() if package is MINILM)
# The workflow's packages (pyproject.toml's `workflow` group), none of which the library needs.
WORKFLOW_ONLY = ["snakemake", "seaborn", "matplotlib"]
# Run in the fresh environment, in a folder outside the checkout (which holds tiny.gguf), with
# the hub id of the MiniLM and WORKFLOW_ONLY as its arguments; it prints one JSON report.
SCRIPT = """
import importlib.util
import json
import sys
from pathlib import Path

model_id, *workflow_only = sys.argv[1:]
report = {"workflow_importable": [name for name in workflow_only
                                  if importlib.util.find_spec(name)]}

import attnlab
from attnlab.data.packages import unpack_model

config = attnlab.validate_config({"name": "installed", "tasks": {"sst2": {
    "source": "synthetic", "synthetic": {"kind": "single2"}, "text_fields": ["sentence"],
    "label_names": ["negative", "positive"]}}})
tolerance = config["attribution"]["tolerance"]  # filled in from the schema's defaults
unpack_model(model_id, Path("minilm"))
model, tokenizer = attnlab.load_classifier("minilm")
inputs = dict(tokenizer("a gripping film", return_tensors="pt"))
result = attnlab.attribute(model, inputs, target="pred", tolerance=tolerance)
report.update(attnlab=attnlab.__file__, tolerance=tolerance, shape=list(result.attr.shape),
              residual=float(result.residual.abs().max()))
job = attnlab.Job.from_config("trees", config, task="sst2", inputs={}, outputs={})
report["trees_settings"] = sorted(job.settings.to_dict())
sentences = attnlab.explain("minilm", ["a gripping film", "dull"], method="attattr")
report["minilm"] = [{"tokens": e.tokens, "completeness": e.completeness}
                    for e in sentences.examples]
rollout = attnlab.explain("minilm", "a gripping film", method="rollout")
report["rollout_rows"] = rollout[0].scores[-1].sum(axis=-1).tolist()
decoder = attnlab.explain("tiny.gguf", "abab", method="attattr")
report["gguf"] = {"tokens": decoder[0].tokens, "completeness": decoder[0].completeness,
                  "prediction": decoder[0].prediction}
print(json.dumps(report))
"""


def run(command: list[str | Path], **kwargs) -> str:
    """The output of `command`; its output and errors in the failure when it fails."""
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True,
                          **kwargs)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_the_wheel_works_in_a_fresh_environment_without_the_workflow(tmp_path):
    started = time.monotonic()
    # The wheel is built from a copy: an in-tree build would leave build/ in the checkout.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    # the test's own environment builds it (it holds setuptools): no download of a build backend
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", tmp_path / "wheels", source])
    wheel = next((tmp_path / "wheels").glob("attnlab-*.whl"))

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])  # without the system's site packages
    python = venv / "bin" / "python"
    # pip's own settings (its index and local wheel folders) as `make run` has them; nothing of
    # this process's environment that would put the checkout or its .venv on the path
    env = {key: value for key, value in os.environ.items()
           if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env.update(PYTHONNOUSERSITE="1", HF_HUB_OFFLINE="1")
    install = [python, "-m", "pip", "install", "--quiet", "--no-compile",
               "--constraint", ROOT / "constraints.txt"]
    run([*install, f"{wheel}[gguf]"], env=env)
    # as make run installs it: without the dependencies it declares (sentence-transformers,
    # matplotlib), which attnlab does not use
    run([*install, "--no-deps", MINILM.requirement], env=env)
    installed = time.monotonic()

    outside = tmp_path / "outside"
    outside.mkdir()
    script = outside / "use_attnlab.py"
    script.write_text(SCRIPT)
    write_gguf(tiny_llama(), outside / "tiny.gguf")
    output = run([python, script, MINILM_ID, *WORKFLOW_ONLY], cwd=outside,
                 env={**env, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    report = json.loads(output.strip().splitlines()[-1])
    print(f"wheel and install {installed - started:.0f} s, "
          f"use {time.monotonic() - installed:.0f} s")

    assert report["workflow_importable"] == []
    assert Path(report["attnlab"]).is_relative_to(venv), report["attnlab"]
    # MiniLM: 6 layers of 12 heads; [CLS] a gripping film [SEP]
    assert report["shape"] == [1, 6, 12, 5, 5]
    # the adaptive rule meets the tolerance that the packaged schema's default set, every layer
    assert report["residual"] <= report["tolerance"]
    # the rule's params as the workflow passes them (the trees stage's keys, its task, its code)
    assert {"trees", "task", "code"} <= set(report["trees_settings"])
    # explain: every text, its tokens, AttAttr's completeness within the tolerance; rollout's
    # rows each sum to 1 (a product of row-stochastic matrices)
    assert [e["tokens"] for e in report["minilm"]] == [
        ["[CLS]", "a", "gripping", "film", "[SEP]"], ["[CLS]", "dull", "[SEP]"]]
    assert all(e["completeness"] <= report["tolerance"] for e in report["minilm"])
    assert report["rollout_rows"] == pytest.approx([1.0] * 5, abs=1e-5)
    # the decoder from its GGUF file: the prompt's tokens as the file's tokenizer reads them
    assert report["gguf"]["tokens"] == ["ab", "ab"]
    assert report["gguf"]["completeness"] <= report["tolerance"]
