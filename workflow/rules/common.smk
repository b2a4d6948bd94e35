import re
from pathlib import Path

from snakemake.io import strip_wildcard_constraints

from attnlab.plumbing.config import validate_config
from attnlab.plumbing.errors import AttnlabError, ConfigError, stop
from attnlab.plumbing.preflight import (HUB_ID, check_config, check_samples, check_writable,
                                       hub_files, task_role)
from attnlab.plumbing.plan_warnings import gpu_visible, hub_warnings, no_gpu_warning
from attnlab.report.summary import FIRST_SEED_ONLY
from attnlab.rule_params import DECODER_ONLY_RULES, NEXT_TOKEN_RULES, ROLE_RULES, RuleParams


def pretrained_model():
    """The local directory of the checkpoint in model.pretrained: the directory itself, or where
    rule download_model puts a hub model; None for a model built from scratch."""
    model = config["model"]
    if model["source"] == "scratch":
        return None
    if Path(model["pretrained"]).is_dir():
        return model["pretrained"]
    if re.fullmatch(HUB_ID, model["pretrained"]):
        return f"resources/models/{model['pretrained']}"
    raise ConfigError(f"model.pretrained: {model['pretrained']!r} is neither a directory nor a "
                      "hub model id (like bert-base-cased)")


def check_papers():
    """report.papers: each names a paper's file of statements. (Here, not in the config checks
    that every stage imports: a change to the claims module reruns the stages with claims
    only.)"""
    from attnlab.analyses.claims import paper

    for name in config["report"]["papers"]:
        try:
            paper(name)
        except KeyError as err:
            raise ConfigError(f"report.papers: {err.args[0]}") from None


# Everything that can be known wrong before any job runs stops the dry run here, in one line:
# Snakemake would show a WorkflowError with a header and lines of this file around it.
try:
    validate_config(config)
    PRETRAINED = pretrained_model()
    check_config(config, PRETRAINED)
    # every rule's params (`params: **PARAMS.of(rule)`); their tasks of different kinds stop here
    PARAMS = RuleParams(config)
    check_papers()
except ConfigError as err:
    stop(err, "config error at ")
# Before Snakemake touches the results folder (it removes a failed job's old log first): a
# folder it cannot write would end in its own traceback.
try:
    check_writable(Path("results", config["name"]))
except AttnlabError as err:
    stop(err)

# The tasks, and those of role `all`, on which every rule with a task runs (rule_tasks: a task
# of another role runs the ROLE_RULES of its role only).
TASKS = PARAMS.tasks
EVERY_STAGE_TASKS = PARAMS.every_stage_tasks


def rule_tasks(name):
    """The tasks the rule `name` runs on."""
    return [task for task in TASKS
            if (role := task_role(config["tasks"][task])) == "all" or name in ROLE_RULES[role]]


# The `name` wildcard of each run (config `seeds`) to its seed, and of each control's run (config
# `controls`) to its control; rule claims gathers them all.
RUNS = PARAMS.runs
CONTROLS = PARAMS.controls
# The rules beyond the papers (and the example views, which show one of them) run in the first
# seed's run only (not in the later seeds', nor in a control's), each for the reason
# attnlab.report.summary.FIRST_SEED_ONLY gives, which the claims page writes beside their
# findings.
FIRST_SEED_RULES = tuple(FIRST_SEED_ONLY)


def rule_runs(name):
    """The runs (seeds) that the rule `name` runs in."""
    return list(RUNS)[:1] if name in FIRST_SEED_RULES else list(RUNS)


SHARDS = range(config["attribution"]["shards"])


# Rules that run a model declare `gpu=GPU`: one GPU is requested (from SLURM, or from the
# local `gpu` limit of profiles/local) unless the config pins the CPU. Memory and run time
# depend on the scale of the configuration and the machine, so they live in the profiles.
GPU = 0 if config["device"] == "cpu" else 1

# Outputs are results/{name}/...: only this configuration's name matches, so nothing is ever
# built under another name with this configuration's settings.
wildcard_constraints:
    name="|".join(map(re.escape, [*RUNS, *CONTROLS, config["name"]])),
    task="|".join(TASKS),
    shard=r"\d+",


def next_seed_importance(wildcards):
    """The head importance of every task at the run's next seed (config `seeds`, cyclically):
    the ceiling of the cross-task correlation, one task fine-tuned twice. None in a one-seed
    run: its ceiling rows say why."""
    runs = list(RUNS)
    if len(runs) < 2 or wildcards.name not in runs:
        return []
    other = runs[(runs.index(wildcards.name) + 1) % len(runs)]
    return expand(rules.head_importance.output.importance, name=other, task=TASKS)


def kinds_rules():
    """The rules this configuration's kind of task runs."""
    if PARAMS.kind == "next_token":
        return [rule for rule in workflow.rules if rule.name in NEXT_TOKEN_RULES]
    return [rule for rule in workflow.rules if rule.name not in DECODER_ONLY_RULES]


def task_files(wildcards):
    """The files a task's data are read from: the downloaded splits of a hub task (no dev split
    when its dev examples are held out from train), the named files of a local one (so that
    editing them reruns the task), the prepared splits of the tasks a mixed task mixes, none
    for a synthetic one."""
    task = config["tasks"][wildcards.task]
    if task["source"] == "hub":
        return hub_files(task["hub"])
    if task["source"] == "local":
        return {split: task["local"][split] for split in ("train", "dev")}
    if task["source"] == "mix":
        return {f"{part}_{split}": f"results/{wildcards.name}/data/{part}/{split}.parquet"
                for part in task["mix"] for split in ("train", "dev")}
    return {}


def for_this_run(step, pattern, runs=None):
    """A file pattern of the rule `step` for every run it runs in (rule_runs; or every run of
    `runs`), every task it runs on (rule_tasks) and every shard of this configuration."""
    names = rule_runs(step.name) if runs is None else list(runs)
    return expand(strip_wildcard_constraints(pattern), name=names, task=rule_tasks(step.name),
                  shard=SHARDS)


# The report's inputs are found by name: every rule's `benchmark:` file and every rule output
# called `claims` (patterns with the wildcards name, task and shard only). These run when the DAG
# is built, after every rule file is included.
def benchmarks_by_rule(wildcards):
    return {rule.name: for_this_run(rule, rule.benchmark) for rule in kinds_rules()
            if rule.benchmark}


def report_figures(wildcards):
    """Every figure of this configuration's runs that a rule marks for the report (its PNG
    outputs, and its folders of PNGs, which rule figures opens), as (path, category, caption
    file, task): the report's page of figures shows each with its caption (rule figures)."""
    figures = []
    # `step`, not `rule`, which Snakemake's lint would read as a rule defined in this file
    for step in kinds_rules():
        for item in step.output:
            marked = item.flags.get("report")
            pattern = strip_wildcard_constraints(str(item))
            figures_folder = bool(marked and marked.patterns) and all(
                p.endswith(".png") for p in marked.patterns)
            if marked is None or not (pattern.endswith(".png") or figures_folder):
                continue
            caption = marked.caption.get_path_or_uri(secret_free=True)
            for task in rule_tasks(step.name) if "{task}" in pattern else [None]:
                figures += [(path, marked.category, caption, task)
                            for path in expand(pattern, name=rule_runs(step.name), task=[task])]
    return figures


def report_figure_files(wildcards):
    return [path for path, *_ in report_figures(wildcards)]


def check_the_samples():
    """Every stage's sample against the split it is drawn from (attnlab.plumbing.preflight
    check_samples), on the tasks each rule of this configuration's kind runs on: a sample that
    cannot be drawn stops the dry run in one line, before any job; a split smaller than a
    sample is one warning line. Called once all rules are defined."""
    try:
        lines = check_samples(config, {step.name: rule_tasks(step.name) for step in kinds_rules()})
    except ConfigError as err:
        stop(err, "config error at ")
    for line in lines:
        print(line, file=sys.stderr)


def warn_about_the_plan():
    """One line each on stderr, before any job runs (the dry run's, and the run's as it starts):
    no GPU on this machine, with the plan's estimated CPU time, and a hub that cannot serve an
    id the configuration names (attnlab.plumbing.plan_warnings). Called once all rules are
    defined, whose jobs are their benchmark files, one per job (benchmarks_by_rule)."""
    jobs = {rule.name: len(for_this_run(rule, rule.benchmark)) for rule in kinds_rules()
            if rule.benchmark}
    for line in [no_gpu_warning(config, jobs, gpu=gpu_visible()), *hub_warnings(config)]:
        if line:
            print(line, file=sys.stderr)


def claims_tables(wildcards):
    return [path for rule in kinds_rules() if "claims" in rule.output.keys()
            for path in for_this_run(rule, rule.output.claims)]


def control_claims_tables(wildcards):
    # a control reruns the papers' findings, not the stages of the first seed only
    return [path for rule in kinds_rules()
            if "claims" in rule.output.keys() and rule.name not in FIRST_SEED_RULES
            for path in for_this_run(rule, rule.output.claims, CONTROLS)]
