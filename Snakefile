"""attnlab: self-attention attribution, end to end (see README.md).

    snakemake --cores 2                                  # the default config.yaml (make run)
    snakemake --cores 2 --configfile config/real.yaml   # another configuration

Every mistake in a configuration stops the dry run (and a run, before its first job) in one
line naming the key, but two that Snakemake itself meets first, reading the file: a missing
file (its own traceback) and a YAML syntax error (its own message, without the line).
`python -m attnlab.plumbing.config <file>` (which `make run` calls) names both in one line with
the line and column (docs/running.md, Errors).
"""

import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# The library in src/ is importable here even when attnlab is not installed; Snakemake passes
# this sys.path on to the scripts of the rules, so they import the same source.
sys.path.insert(0, str(Path(workflow.basedir, "src")))

# A --configfile replaces the embedded default instead of being merged into it (Snakemake's
# default), so another configuration never inherits the default's tasks.
if not workflow.overwrite_configfiles:

    configfile: Path(workflow.basedir, "config.yaml")


# common.smk validates the config, fills its defaults and defines what the rules share.
include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/attribute.smk"
include: "workflow/rules/heads.smk"
# before trees.smk: the explorer of rule example_views reads the interaction methods' scores
include: "workflow/rules/interaction_methods.smk"
include: "workflow/rules/trees.smk"
include: "workflow/rules/triggers.smk"
include: "workflow/rules/identifiability.smk"
include: "workflow/rules/explanation.smk"
include: "workflow/rules/induction.smk"
# the report's own pages, gathering what every stage wrote
include: "workflow/rules/report.smk"


report: "workflow/report/workflow.rst"


# Once, in the process that plans the jobs (not in each job a cluster runs).
if workflow.is_main_process:
    check_the_samples()
    warn_about_the_plan()


localrules:
    all,


# The report's own pages: the run summary gathers the benchmark file of every job of the rules
# this configuration's kind of task runs (kinds_rules in common.smk), the claims page every
# output called `claims`, the figures page every figure marked for the report, so they plan
# every stage; a new stage needs no line here.
rule all:
    input:
        expand(rules.run_summary.output.page, name=config["name"]),
        expand(rules.claims.output.page, name=config["name"]),
        expand(rules.figures.output.page, name=config["name"]),
