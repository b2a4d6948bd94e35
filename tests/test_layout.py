"""The layout a newcomer walks through: one stage module per rule, named after it, which the
rule's script calls and nothing else; layers that import one way only; no stage importing
another."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEFAULT_CONFIG

from attnlab.plumbing import code_version
from attnlab.report.summary import FIRST_SEED_ONLY
from attnlab.rule_params import DECODER_ONLY_RULES, NEXT_TOKEN_RULES, PARAMS_OF, ROLE_RULES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnlab"
# Each layer may import from its own and the ones before it, never from one after it.
LAYERS = ("plumbing", "data", "engine", "methods", "analyses", "report", "explanation",
          "job", "stages", "cli")
# The job object and the rules' params it is built with sit between the report and the stages:
# the stages take it, nothing below does.
JOB_MODULES = {"job": "job", "model_job": "job", "rule_params": "job"}


def workflow_rules() -> dict[str, str]:
    """Each rule of the workflow (but `all`) and the text of its block."""
    rules = {}
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"^\s*rule (?=\w+:$)", path.read_text(), flags=re.M)[1:]:
            rules[block.split(":", 1)[0].strip()] = block
    return rules


RULES = workflow_rules()


def layer(module: str) -> str:
    return JOB_MODULES.get(module, module.split(".")[0])


def test_the_rules_are_the_workflow_s_rules():
    # the per-kind lists name rules there are (`all` is the Snakefile's)
    assert set(NEXT_TOKEN_RULES) - {"all"} <= set(RULES)
    assert set(DECODER_ONLY_RULES) <= set(RULES)
    assert all(set(rules) <= set(RULES) for rules in ROLE_RULES.values())
    assert set(FIRST_SEED_ONLY) <= set(RULES)
    assert {"attribute", "trees", "claims", "finetune", "induction"} <= set(RULES)
    # each rule's params are the package's, and only a rule has params there
    assert set(PARAMS_OF) == set(RULES)


def test_every_rule_has_its_row_in_the_outputs_page():
    outputs = (ROOT / "docs" / "outputs.md").read_text()
    for rule in RULES:
        assert f"| `{rule}` |" in outputs, f"docs/outputs.md has no row for rule {rule}"


def test_every_stage_that_judges_findings_knows_whether_its_model_learned_its_task():
    """A rule with an output named claims takes fine-tuning's metrics, and its stage passes its
    claims through `claims.on_models` (docs/design.md, "A stage")."""
    judging = [rule for rule, block in RULES.items()
               if re.search(r"^\s+claims=", block.split("output:", 1)[1].split("params:")[0],
                            flags=re.M)]
    assert len(judging) >= 12, judging
    for rule in judging:
        inputs = RULES[rule].split("input:", 1)[1].split("output:", 1)[0]
        assert "finetune_metrics=" in inputs, f"rule {rule} has no input finetune_metrics"
        stage = (PACKAGE / "stages" / f"{rule}.py").read_text()
        assert "on_models(" in stage, f"stages/{rule}.py does not call claims.on_models"


def _figure_outputs(block: str) -> list[str]:
    """The figures a rule's block writes (PNG files or folders of them), each as the text of
    its output item."""
    outputs = block.split("output:", 1)[1].split("params:", 1)[0]
    items = re.split(r"^\s{8}(?=\w+=)", outputs, flags=re.M)[1:]
    return [item for item in items if re.search(r'\.png"', item)]


@pytest.mark.parametrize("rule", sorted(rule for rule, block in RULES.items()
                                        if _figure_outputs(block)))
def test_every_figure_is_on_the_figures_page_with_its_caption_drawn_by_the_report(rule):
    """A stage's figure: an output marked report(...) with a caption file of workflow/report/
    (the figures page gathers every such PNG), drawn by a module of report/ (docs/design.md,
    "A stage")."""
    for item in _figure_outputs(RULES[rule]):
        assert re.match(r"\w+=report\(", item), f"rule {rule}: figure without report(): {item}"
        caption = re.search(r'caption="\.\./report/([\w.]+\.rst)"', item)
        assert caption and (ROOT / "workflow" / "report" / caption[1]).is_file(), item
    drawing = {m for m in code_version.code_closure(f"stages.{rule}")
               if m.startswith("report.") and m.endswith("_figures")}
    assert drawing, f"stages/{rule}.py draws its figures with no report/*_figures.py module"


# What docs/design.md ("Where to add things", "A stage") says a new stage with claims and a
# figure needs: a rule in the rule file of its area (its claims with the input
# finetune_metrics, its figure marked report(...) with a caption file of workflow/report/), its
# params in attnlab/rule_params.py, its script, its stage module (and its row in
# docs/outputs.md, and its claims' stage heading in report/findings.py, which the tests of those
# check without a run).
DUMMY_RULE = """

rule dummy_stage:
    input:
        finetune_metrics=rules.finetune.output.metrics,
        dev=rules.prepare_data.output.dev,
    output:
        claims="results/{name}/dummy_stage/{task}/claims.parquet",
        figure=report(
            "results/{name}/dummy_stage/{task}/figure.png",
            caption="../report/dummy_stage.rst",
            category="Dummy",
            labels={"task": "{task}"},
        ),
    params:
        **PARAMS.of("dummy_stage"),
    log:
        "results/{name}/logs/dummy_stage/{task}.log",
    benchmark:
        "results/{name}/benchmarks/dummy_stage/{task}.tsv"
    script:
        "../scripts/dummy_stage.py"
"""
DUMMY_PARAMS = """

@_rule
def dummy_stage(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("trees.tau"), "task": p.task_spec}
"""
DUMMY_SCRIPT = '''"""Rule dummy_stage: attnlab.stages.dummy_stage."""

from attnlab.job import Job
from attnlab.stages import dummy_stage

Job.run_rule(snakemake, dummy_stage.run)
'''
DUMMY_STAGE = '''"""Rule dummy_stage: a stage of the layout test."""

from attnlab.job import Job


def run(job: Job) -> None:
    job.write_tables({})
'''


def test_a_new_stage_is_planned_with_only_the_files_the_design_notes_name(tmp_path):
    for name in ("Snakefile", "config.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    no_cache = shutil.ignore_patterns("__pycache__")
    for folder in ("workflow", "src"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=no_cache)
    with (tmp_path / "workflow" / "rules" / "trees.smk").open("a") as rules:
        rules.write(DUMMY_RULE)
    (tmp_path / "workflow" / "scripts" / "dummy_stage.py").write_text(DUMMY_SCRIPT)
    (tmp_path / "workflow" / "report" / "dummy_stage.rst").write_text("The dummy's figure.\n")
    (tmp_path / "src" / "attnlab" / "stages" / "dummy_stage.py").write_text(DUMMY_STAGE)
    with (tmp_path / "src" / "attnlab" / "rule_params.py").open("a") as params:
        params.write(DUMMY_PARAMS)
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1"], cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(tmp_path / "src")},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    # one job per task, whose claims the claims page gathers with every other stage's and
    # whose figure the figures page shows
    planned = re.search(r"^dummy_stage\s+(\d+)$", result.stdout, re.M)
    assert planned and int(planned[1]) == len(DEFAULT_CONFIG["tasks"]), result.stdout
    for page in ("claims", "figures"):
        job = result.stdout.split(f"rule {page}:", 1)[1].split("\n\n", 1)[0]
        expected = "claims.parquet" if page == "claims" else "figure.png"
        assert f"dummy_stage/syn_sst2/{expected}" in job, page


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_rule_runs_its_script_which_calls_the_stage_named_after_it(rule):
    block = RULES[rule]
    assert f'"../scripts/{rule}.py"' in block, f"rule {rule} runs another script"
    # its own params, whose `code` is its stage's version (attnlab.rule_params)
    assert f'**PARAMS.of("{rule}"' in block, f"rule {rule} passes another rule's params"
    script = ROOT / "workflow" / "scripts" / f"{rule}.py"
    body = ast.parse(script.read_text()).body
    docstring, job_import, stage_import, call = body  # nothing else
    assert isinstance(docstring.value, ast.Constant)
    assert stage_import.module == "attnlab.stages"
    assert [a.name for a in stage_import.names] == [rule]
    (job_class,) = (a.name for a in job_import.names)
    assert ast.unparse(call) == f"{job_class}.run_rule(snakemake, {rule}.run)"
    # the script builds the job the stage takes
    stage = ast.parse((PACKAGE / "stages" / f"{rule}.py").read_text())
    (run,) = (f for f in stage.body if isinstance(f, ast.FunctionDef) and f.name == "run")
    assert ast.unparse(run.args.args[0].annotation) == job_class


def test_every_stage_module_is_a_rule():
    stages = {p.stem for p in (PACKAGE / "stages").glob("*.py") if p.stem != "__init__"}
    assert stages == set(RULES)


def test_no_stage_imports_another_stage():
    for module in code_version.library_modules():
        if layer(module) == "stages":
            imported = {m for m in code_version.attnlab_imports(module) if layer(m) == "stages"}
            assert not imported, f"{module} imports the stage(s) {imported}"


def test_imports_point_one_way():
    for module in code_version.library_modules():
        for imported in code_version.attnlab_imports(module):
            assert LAYERS.index(layer(imported)) <= LAYERS.index(layer(module)), \
                f"{module} ({layer(module)}) imports {imported} ({layer(imported)})"


def test_every_module_is_in_a_layer():
    assert {layer(m) for m in code_version.library_modules()} <= set(LAYERS)


def test_the_layer_packages_hold_only_their_docstring():
    # the code hashes follow the imports written in modules; the top package's public names
    # are imported lazily (attnlab/__init__.py)
    for init in PACKAGE.glob("*/__init__.py"):
        (docstring,) = ast.parse(init.read_text()).body
        assert isinstance(docstring.value, ast.Constant), init


def test_the_design_notes_describe_every_layer_folder():
    design = (ROOT / "docs" / "design.md").read_text()
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == set(LAYERS) - {"explanation", "job", "cli"}
    for folder in folders:
        assert f"* **`{folder}/`**" in design, folder
