"""What each rule's code hash covers (`attnlab.plumbing.code_version.code_closure`, the imports of
the modules a rule names in `code_version`): no import cycle, no stage reaching into another stage's
module, and an edit reruns only the rules that run the edited code. Also which rules' jobs start
without importing torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.plumbing import code_version

ROOT = Path(__file__).resolve().parents[1]
MODULES = code_version.library_modules()
# Rule modules that other stages may import: attributing examples into a dump is one job
# (rule attribute), which the trigger and quadrature stages run on their own examples too; a
# model's tokenizer is what rule prepare_data checks every example against before any training,
# and what fine-tuning builds.
SHARED_STAGES = {"engine.attribution_shards", "data.tokenization"}


def rule_modules() -> dict[str, list[str]]:
    """Each rule of the workflow and the modules it passes to code_version."""
    rules = {}
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"^\s*rule ", path.read_text(), flags=re.M)[1:]:
            name = block.split(":", 1)[0].strip()
            match = re.search(r"code_version\(([^)]*)\)", block)
            if match:
                rules[name] = re.findall(r'"([\w.]+)"', match[1])
    return rules


def rules_running(module: str) -> set[str]:
    """The rules whose code hash changes when `module` is edited."""
    return {rule for rule, names in rule_modules().items()
            if module in code_version.code_closure(*names)}


def test_every_rule_has_a_code_version():
    rules = rule_modules()
    assert {"attribute", "trees", "token_mixing", "attack_eval", "task_correlation"} <= set(rules)


def test_no_import_cycle():
    graph = {m: code_version.attnlab_imports(m) for m in MODULES}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, "import cycle: " + " -> ".join([*path, module])
        if module in done:
            return
        for imported in graph[module]:
            visit(imported, [*path, module])
        done.add(module)

    for module in MODULES:
        visit(module, [])


def test_no_stage_imports_another_stages_module():
    entries = {m for names in rule_modules().values() for m in names}
    for stage in entries:
        others = entries - {stage} - SHARED_STAGES
        # a stage draws its figures with its figure module, which may be a rule's entry too
        figures = {m for m in others if m.endswith("_figures")}
        imported = code_version.attnlab_imports(stage) - figures
        assert not imported & others, f"{stage} imports {imported & others}"


def test_figure_helpers_rerun_only_rules_that_draw():
    drawing = rules_running("report.figures")
    assert drawing == rules_running("report.head_figures") | rules_running("report.flow_figures") \
        | rules_running("report.trigger_figures") | rules_running("report.explanation_figures") \
        | rules_running("report.identifiability_figures") \
        | rules_running("report.interaction_figures") \
        | rules_running("analyses.quadrature_study")
    assert not drawing & {"attribute", "summarise_attributions", "head_importance", "prune_eval",
                          "finetune", "prepare_data", "mine_triggers", "run_summary", "claims"}


def test_engine_edits_do_not_rerun_stages_that_never_attribute():
    attributing = rules_running("engine.attribution")
    assert {"attribute", "quadrature_study", "example_views", "mine_triggers"} <= attributing
    assert not attributing & {"token_mixing", "token_identifiability", "effective_attention",
                              "attention_permutation", "adversarial_attention", "attack_eval",
                              "head_importance", "prune_eval", "trees", "task_correlation"}
    assert not rules_running("data.dumps") & {"token_mixing", "token_identifiability",
                                         "effective_attention", "attention_permutation",
                                         "adversarial_attention"}


def test_tree_edits_rerun_only_the_tree_stages():
    assert rules_running("analyses.trees") == {"trees", "example_views"}
    assert "attack_eval" not in rules_running("analyses.trees")


def test_a_shared_helper_edit_reruns_its_users_only():
    assert rules_running("analyses.heads") == {"head_importance"}
    assert rules_running("analyses.claims") >= {"trees", "attack_eval", "prune_eval",
                                                 "token_mixing"}
    assert not rules_running("analyses.claims") & {"attribute", "head_importance", "finetune"}


def test_a_training_edit_reruns_no_data_preparation():
    assert "prepare_data" not in rules_running("engine.training")
    assert rules_running("data.tokenization") >= {"prepare_data", "finetune", "pretrain"}


# Jobs that only read and write tables: importing torch and transformers' model code would
# be most of their run time (about 6 s of a 2-core machine's job start-up).
@pytest.mark.parametrize("script", ["prepare_data", "trees", "summarise_attributions",
                                    "task_correlation", "pruning_figures"])
def test_table_only_jobs_start_without_torch(script):
    source = (ROOT / "workflow" / "scripts" / f"{script}.py").read_text()
    modules = re.findall(r"^from (attnlab[\w.]*) import", source, flags=re.M)
    assert modules, f"{script}.py imports nothing from attnlab"
    check = f"import sys, {', '.join(modules)}; sys.exit('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert result.returncode == 0, f"{script}.py imports torch ({modules}) {result.stderr}"
