"""The params of every workflow rule: what Snakemake passes a rule's job, and what
`attnlab.job.Job.from_config` gives a job outside Snakemake.

A rule's `params:` directive is one line, `**PARAMS.of("trees")` (`PARAMS`: this configuration's
`RuleParams`, made in workflow/rules/common.smk). Its entry below (the function named after the
rule) lists the parts of the config its stage reads, by their dotted paths (`paths`), and the
settings that depend on the job's wildcards (the task's columns, the run's seed): methods of
`RuleParams` taking `wildcards`, which Snakemake calls for each job. A change to any of them
reruns the rule and nothing else does; the stage reads them under the same names
(`job.settings.trees.tau`), and a key its rule does not pass is an error. Every rule passes
`code` too, the version of its stage module (`attnlab.plumbing.code_version`), so that an edit
of the code it runs reruns it.

They are Python here, not in the rule files, so that a job built from an installed package has
the settings its rule gives it in the workflow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from attnlab.engine.options import ENGINE_KEYS
from attnlab.plumbing.code_version import code_version
from attnlab.plumbing.errors import AttnlabError
from attnlab.plumbing.preflight import task_kind, task_role

# A task of a role other than `all` (config tasks.<name>.role) runs only the rules its role
# names, those of the one analysis it is there for; every other rule with a task runs on the
# tasks of role `all`.
# a task's data, its model and their attributions: what every analysis reads
ATTRIBUTED_RULES = ("download_data", "prepare_data", "finetune", "attribute",
                    "summarise_attributions")
ROLE_RULES = {
    "correlation": (*ATTRIBUTED_RULES, "head_importance"),  # Hao et al. 2021 Fig. 5
    "induction_heads": (*ATTRIBUTED_RULES, "induction_heads")}
# The rules of a next_token configuration (a decoder language model): every other stage reads
# a classifier, so it is left out, its outputs neither requested nor gathered by the report.
NEXT_TOKEN_RULES = ("download_data", "download_model", "prepare_data", "finetune", "attribute",
                    "summarise_attributions", "trees", "example_views", "head_importance",
                    "prune_eval", "pruning_figures", "effective_attention", "interaction_methods",
                    "induction", "induction_heads", "run_summary", "claims", "figures", "all")
# the rules of next_token configurations only
DECODER_ONLY_RULES = ("induction", "induction_heads")

# The settings of every stage that runs a trained model: its tokenization settings (the model
# itself is an input) and where and in which precision it runs.
MODEL_JOB = ("model.max_length", "model.truncate", "device", "precision")
# The settings of every stage that attributes: the attribution engine's, the keyword arguments
# of attnlab.engine.attribution.attribute.
ENGINE = tuple(f"attribution.{key}" for key in ENGINE_KEYS)


class RuleParams:
    """The params of the rules for one validated config: its tasks, its runs and their seeds,
    and the settings that depend on a job's wildcards (`name`: the run; `task`).

    `seed`: the seed of every run (a job outside the workflow, of one run); None: each run's
    own, by its name (config `seeds`)."""

    def __init__(self, config: Mapping[str, Any], *, seed: int | None = None) -> None:
        self.config = config
        self.kind = task_kind(dict(config))
        self.tasks = list(config["tasks"])
        self.every_stage_tasks = [task for task in self.tasks
                                  if task_role(config["tasks"][task]) == "all"]
        # Replication (config `seeds`): each seed is a run of its own, laid out as a one-seed
        # run, in results/<name>/seed=<s>/ (one seed: results/<name>/ itself). `runs` maps the
        # `name` wildcard of each run to its seed.
        self.seeds = config["seeds"] or [config["seed"]]
        if len(self.seeds) == 1:
            self.runs = {config["name"]: self.seeds[0]}
        else:
            self.runs = {f"{config['name']}/seed={seed}": seed for seed in self.seeds}
        # Controls (config `controls`): each a run of its own, laid out as a one-seed run, in
        # results/<name>/control=<control>/, with the first seed. `controls` maps the `name`
        # wildcard of each to its control.
        self.controls = {f"{config['name']}/control={control}": control
                         for control in config["controls"]}
        self.seed = seed

    def of(self, rule: str, **given: Any) -> dict[str, Any]:
        """The params of `rule`, each a value or a function of the job's wildcards; `given`:
        those only the workflow knows (rule figures: every rule's figures)."""
        if rule not in PARAMS_OF:
            raise AttnlabError(f"no rule {rule} (attnlab.rule_params)")
        return {**PARAMS_OF[rule](self, **given), "code": code_version(f"stages.{rule}")}

    def paths(self, *paths: str) -> dict[str, Any]:
        """The parts of the config that a stage reads, named by their dotted paths, as one
        nested mapping; the stage reads them under the same paths (`job.settings`)."""
        part: dict[str, Any] = {}
        for path in paths:
            *parents, key = path.split(".")
            source, target = self.config, part
            for name in parents:
                source, target = source[name], target.setdefault(name, {})
            target[key] = source[key]
        return part

    def run_seed(self, wildcards: Any) -> int:
        """The seed of a run: model initialisation, training order and every seeded stage (a
        control's: the first seed's)."""
        return self.runs.get(wildcards.name, self.seeds[0]) if self.seed is None else self.seed

    def run_control(self, wildcards: Any) -> str | None:
        """The control a run is (None: a run of this configuration's own)."""
        return self.controls.get(wildcards.name)

    def data_seed(self, wildcards: Any) -> int:
        """The seed of a run's data: config `seed` for every run (each seed sees the same
        data), unless data_per_seed asks for the run's own."""
        return self.run_seed(wildcards) if self.config["data_per_seed"] else self.config["seed"]

    def task_data(self, wildcards: Any) -> dict[str, Any]:
        """A task's data settings; its finetune overrides go to the finetune rule only, and its
        role decides which rules run on it, not what they compute."""
        return {key: value for key, value in self.config["tasks"][wildcards.task].items()
                if key not in ("finetune", "role")}

    def columns_of(self, task: str) -> dict[str, Any]:
        """What the stages after prepare_data use of a task: its columns and class names (a
        next_token task: its kind, prompt column and target column)."""
        if self.kind == "next_token":
            keys = ("kind", "text_fields", "target_field")
        else:
            keys = ("text_fields", "label_names", "label_field")
        return {key: self.config["tasks"][task].get(key) for key in keys}

    def task_spec(self, wildcards: Any) -> dict[str, Any]:
        return self.columns_of(wildcards.task)

    def task_parts(self, wildcards: Any) -> dict[str, dict[str, Any]]:
        """The columns and class names of the tasks a mixed task mixes, by name ({}
        otherwise)."""
        return {part: self.columns_of(part)
                for part in self.config["tasks"][wildcards.task].get("mix") or []}

    def task_finetune(self, wildcards: Any) -> dict[str, Any]:
        """The finetune settings of a task: the top-level ones with the task's overrides."""
        return {**self.config["finetune"],
                **self.config["tasks"][wildcards.task].get("finetune", {})}

    def head_examples_only(self, wildcards: Any) -> bool:
        """Whether rule attribute attributes only the task's first heads.importance_examples
        dev examples: of a task whose role runs no rule that reads its attributions but
        head_importance (and their summary), only those are read (role correlation)."""
        role = task_role(self.config["tasks"][wildcards.task])
        return role in ROLE_RULES and set(ROLE_RULES[role]) <= {*ATTRIBUTED_RULES,
                                                                "head_importance"}


def rule_params(rule: str, config: Mapping[str, Any], *, task: str | None = None,
                seed: int | None = None) -> dict[str, Any]:
    """The params of `rule` for the validated `config` as Snakemake gives them to its job of
    the task `task` in a run of seed `seed` (config `seed` if None)."""
    params = RuleParams(config, seed=config["seed"] if seed is None else seed)
    wildcards = SimpleNamespace(name=config["name"], **({} if task is None else {"task": task}))
    try:
        return {name: value(wildcards) if callable(value) else value
                for name, value in params.of(rule).items()}
    except AttributeError as err:  # a wildcard not given
        raise AttnlabError(f"rule {rule}: its params need the wildcard {err.name}") from None


# The params of each rule but `code`, by its name, in the order of the rule files.
PARAMS_OF: dict[str, Callable[..., dict[str, Any]]] = {}


def _rule(params: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    PARAMS_OF[params.__name__] = params
    return params


# workflow/rules/data.smk


@_rule
def download_data(p: RuleParams) -> dict[str, Any]:
    return {}


@_rule
def download_model(p: RuleParams) -> dict[str, Any]:
    return p.paths("model.gguf_file")


@_rule
def prepare_data(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("model.source", "model.gguf_file", "model.max_length", "model.truncate"),
            "task": p.task_data, "parts": p.task_parts, "seed": p.data_seed}


# workflow/rules/finetune.smk


@_rule
def pretrain(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("model.scratch", "model.max_length", "model.pretrain", "device",
                      "precision",
                      # every task's columns, in the order of the input train
                      *(f"tasks.{task}.{key}" for task in p.tasks
                        for key in ("text_fields", "label_names", "label_field"))),
            "seed": p.run_seed}


@_rule
def finetune(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("model", "device", "precision"),
            "task": p.task_spec,
            # a merged view, not a config path: the top-level finetune settings with the task's
            # own (tasks.<task>.finetune) on top, read by the stage as job.settings.finetune
            "finetune": p.task_finetune,
            "seed": p.run_seed,
            # a control run's model: the untrained one fine-tuning starts from (config controls)
            "control": p.run_control}


# workflow/rules/attribute.smk


@_rule
def attribute(p: RuleParams) -> dict[str, Any]:
    return {**p.paths(*ENGINE, "attribution.target", "attribution.top_pairs",
                      "attribution.keep_full", "attribution.edge_min_fraction",
                      "attribution.max_edges_per_layer", "attribution.shards",
                      "attribution.max_examples", "heads.importance_examples", *MODEL_JOB),
            "task": p.task_spec, "head_examples_only": p.head_examples_only}


@_rule
def summarise_attributions(p: RuleParams) -> dict[str, Any]:
    return p.paths("attribution.shards", "attribution.tolerance")


@_rule
def quadrature_study(p: RuleParams) -> dict[str, Any]:
    return {**p.paths(*ENGINE, "attribution.target", "attribution.top_pairs",
                      "attribution.keep_full", "attribution.edge_min_fraction",
                      "attribution.max_edges_per_layer", "attribution.study_examples",
                      "attribution.study_panels", *MODEL_JOB),
            "tasks": {task: p.config["tasks"][task] for task in p.every_stage_tasks}}


# workflow/rules/heads.smk


@_rule
def head_importance(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("heads.methods", "heads.importance_examples",
                      "heads.min_evaluation_examples", "heads.random_seeds", "heads.batch_size",
                      "attribution.target", *MODEL_JOB),
            "task": p.task_spec, "seed": p.run_seed}


@_rule
def prune_eval(p: RuleParams) -> dict[str, Any]:
    # the misclassified examples are attributed to the label the dumps do not hold
    return {**p.paths("heads.prune_percents", "heads.batch_size", "heads.importance_examples",
                      "heads.min_evaluation_examples", "heads.random_seeds",
                      "attribution.target", *ENGINE, *MODEL_JOB),
            "task": p.task_spec, "seed": p.run_seed}


@_rule
def pruning_figures(p: RuleParams) -> dict[str, Any]:
    return {}


@_rule
def task_correlation(p: RuleParams) -> dict[str, Any]:
    # the model's source and the tasks' sources decide whether the claims can be tested
    return {**p.paths("heads.similar_pairs", "heads.dissimilar_pairs", "model.source",
                      "model.pretrain.epochs", "tasks"),
            # the floor's permutations
            "seed": p.run_seed}


# workflow/rules/interaction_methods.smk


@_rule
def interaction_methods(p: RuleParams) -> dict[str, Any]:
    # the config's seed, not the run's (run_seed): every run of `seeds` breaks ties alike
    return {**p.paths("interaction_methods", "seed", *MODEL_JOB, *ENGINE), "task": p.task_spec}


# workflow/rules/trees.smk


@_rule
def trees(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("trees.tau", "trees.normalise", "trees.examples", "trees.example_idx"),
            "task": p.task_spec, "seed": p.run_seed}


@_rule
def example_views(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("trees.examples", "trees.example_idx", "trees.heatmap_layer", "trees.tau",
                      "trees.normalise", *ENGINE, "attribution.target", *MODEL_JOB),
            "task": p.task_spec, "seed": p.run_seed}


# workflow/rules/triggers.smk


@_rule
def mine_triggers(p: RuleParams) -> dict[str, Any]:
    # the dumps' engine and edges; target and example count come from triggers (the source
    # split is the input's)
    return {**p.paths("triggers.source_examples", "triggers.target", "triggers.score_threshold",
                      "triggers.second_pair_ratio", *ENGINE, "attribution.top_pairs",
                      "attribution.edge_min_fraction", "attribution.max_edges_per_layer",
                      *MODEL_JOB),
            "task": p.task_data}


@_rule
def attack_eval(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("triggers.top", "triggers.random_draws", "triggers.batch_size",
                      *MODEL_JOB),
            # the data settings too: the figure names a synthetic task's planted triggers
            "task": p.task_data, "seed": p.run_seed}


# workflow/rules/identifiability.smk


@_rule
def effective_attention(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("identifiability.effective_attention", "identifiability.batch_size",
                      *MODEL_JOB),
            "task": p.task_spec}


@_rule
def token_identifiability(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("identifiability.token_identifiability", "identifiability.batch_size",
                      *MODEL_JOB),
            "task": p.task_spec, "seed": p.run_seed}


@_rule
def token_mixing(p: RuleParams) -> dict[str, Any]:
    # one example at a time: identifiability.batch_size is not read
    return {**p.paths("identifiability.token_mixing", *MODEL_JOB),
            "task": p.task_spec, "seed": p.run_seed}


# workflow/rules/explanation.smk


@_rule
def attention_permutation(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("explanation.attention_permutation", "explanation.batch_size",
                      "explanation.gradient", *MODEL_JOB),
            "task": p.task_spec, "seed": p.run_seed}


@_rule
def adversarial_attention(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("explanation.adversarial_keys", "explanation.adversarial_attention",
                      "explanation.batch_size", *MODEL_JOB),
            "task": p.task_spec, "seed": p.run_seed}


# workflow/rules/induction.smk


@_rule
def induction(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("induction.examples", *MODEL_JOB), "task": p.task_spec, "seed": p.run_seed}


@_rule
def induction_heads(p: RuleParams) -> dict[str, Any]:
    return {**p.paths("induction.head_examples", "induction.ablation_examples",
                      "induction.ablation_k", "induction.random_draws", "heads.batch_size",
                      "attribution.target", *ENGINE, *MODEL_JOB),
            "task": p.task_spec, "seed": p.run_seed}


# workflow/rules/report.smk


@_rule
def run_summary(p: RuleParams) -> dict[str, Any]:
    return {"config": p.config}


@_rule
def claims(p: RuleParams) -> dict[str, Any]:
    return p.paths("report.papers")


@_rule
def figures(p: RuleParams, *, figures: Any) -> dict[str, Any]:
    # (path, category, caption file, task) of each figure, which only the workflow knows: a
    # function of the wildcards, so that it sees every rule
    return {"figures": figures}
