"""What each rule's code hash covers (`attnlab.plumbing.code_version`: the rule's stage module,
`stages/<rule>.py`, and every library module it imports, directly or not), as rules about the
library's folders: an edit reruns exactly the rules that run the edited code. Also which
rules' jobs start without importing torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_layout import ROOT, RULES, layer

from attnlab.plumbing import code_version

MODULES = code_version.library_modules()


def rules_running(module: str) -> set[str]:
    """The rules whose code hash changes when `module` ("engine.models") is edited."""
    return {rule for rule in RULES if module in code_version.code_closure(f"stages.{rule}")}


def in_folder(folder: str) -> list[str]:
    return [module for module in MODULES if module.startswith(f"{folder}.")]


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


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_stage_edit_reruns_its_rule_only(rule):
    assert rules_running(f"stages.{rule}") == {rule}


def test_plumbing_and_the_job_object_rerun_every_rule():
    # what every job runs in: its log, its checks, its outputs' provenance
    for module in ("plumbing.outputs", "plumbing.settings", "job"):
        assert rules_running(module) == set(RULES), module


def test_an_edit_of_the_rules_params_reruns_no_rule_through_its_code_hash():
    # the job object imports them (for jobs outside the workflow), but Snakemake compares the
    # params themselves: an edit reruns only the rules whose params it changes
    assert "rule_params" in code_version.attnlab_imports("job")
    assert rules_running("rule_params") == set()


def test_a_figure_edit_reruns_only_rules_that_draw():
    drawing = {rule for rule in RULES if any(
        layer(m) == "report" for m in code_version.attnlab_imports(f"stages.{rule}"))}
    for module in in_folder("report"):
        assert rules_running(module) <= drawing, module
    assert not drawing & {"attribute", "summarise_attributions", "head_importance", "prune_eval",
                          "finetune", "prepare_data", "mine_triggers"}


def test_a_method_edit_reruns_the_interaction_methods_only():
    # and the induction stage of next-token configurations, which scores methods (rollout) too,
    # and induction_heads, which judges head kinds by the induction stage's bar
    for module in in_folder("methods"):
        assert rules_running(module) - {"induction", "induction_heads"} == {
            "interaction_methods"}, module
    assert "induction" in rules_running("methods.rollout")


def test_engine_edits_do_not_rerun_stages_that_never_attribute():
    attributing = rules_running("engine.attribution")
    # prune_eval attributes the misclassified examples to their predicted label
    assert {"attribute", "quadrature_study", "example_views", "mine_triggers",
            "prune_eval"} <= attributing
    assert not attributing & {"token_mixing", "token_identifiability", "effective_attention",
                              "attention_permutation", "adversarial_attention", "attack_eval",
                              "head_importance", "trees", "task_correlation"}
    assert not rules_running("data.dumps") & {"token_mixing", "token_identifiability",
                                              "effective_attention", "attention_permutation",
                                              "adversarial_attention"}


def test_an_analysis_edit_reruns_its_users_only():
    # induction: next-token configurations' trees (and induction_heads, which judges head
    # kinds by the induction stage's bar)
    assert rules_running("analyses.trees") == {"trees", "example_views", "induction",
                                                "induction_heads"}
    # prune_eval: a decoder's per-layer attention ranking (heads.ranking_scores);
    # induction_heads: attribution patching and the heads' mean outputs
    assert rules_running("analyses.heads") == {"head_importance", "prune_eval",
                                                "induction_heads"}
    assert rules_running("analyses.claims") >= {"trees", "attack_eval", "prune_eval",
                                                "token_mixing"}
    assert not rules_running("analyses.claims") & {"attribute", "head_importance", "finetune"}


def test_a_training_edit_reruns_no_data_preparation():
    assert rules_running("engine.training") == {"pretrain", "finetune"}
    assert rules_running("data.tokenization") >= {"prepare_data", "finetune", "pretrain"}


# Jobs that run no model (their script builds a `Job`, not a `ModelJob`): importing torch and
# transformers' model code would be most of their run time (about 6 s of a 2-core machine's
# job start-up).
TABLE_ONLY = sorted(rule for rule in RULES
                    if "ModelJob" not in (ROOT / "workflow" / "scripts" / f"{rule}.py").read_text())


def test_the_table_only_jobs_are_those_that_run_no_model():
    assert {"prepare_data", "trees", "summarise_attributions", "task_correlation",
            "pruning_figures", "claims", "run_summary"} <= set(TABLE_ONLY)
    assert not {"attribute", "finetune", "example_views"} & set(TABLE_ONLY)


@pytest.mark.parametrize("rule", TABLE_ONLY)
def test_table_only_jobs_start_without_torch(rule):
    check = f"import sys, attnlab.job, attnlab.stages.{rule}; sys.exit('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert result.returncode == 0, f"stages.{rule} imports torch {result.stderr}"
