# Each task's dev split is attributed in config attribution.shards independent jobs; the
# shards form one hive-partitioned Parquet dataset (results/<name>/attributions/).
rule attribute:
    input:
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
    output:
        part="results/{name}/attributions/task={task}/shard={shard}/part.parquet",
        # "_" keeps the summary out of the dataset when pyarrow or pandas read the folder
        summary="results/{name}/attributions/task={task}/shard={shard}/_summary.json",
    params:
        **PARAMS.of("attribute"),
    log:
        "results/{name}/logs/attribute/{task}/shard={shard}.log",
    benchmark:
        "results/{name}/benchmarks/attribute/{task}/shard={shard}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/attribute.py"


# Gathers a task's shards: fails unless every shard is there, then summarises the dump
# (accuracy, completeness error, size, planted-pair recovery on synthetic tasks) and judges the
# ground-truth claims of synthetic tasks (attnlab.analyses.attribution_summary; no rows for other
# tasks).
rule summarise_attributions:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        parts=lambda wildcards: expand(
            rules.attribute.output.part, name=wildcards.name, task=wildcards.task, shard=SHARDS
        ),
    output:
        summary=report(
            "results/{name}/attribution_summary/{task}.json",
            caption="../report/attribution_summary.rst",
            category="Attribution",
            labels={"task": "{task}"},
        ),
        claims="results/{name}/attribution_summary/{task}_claims.parquet",
    params:
        **PARAMS.of("summarise_attributions"),
    log:
        "results/{name}/logs/summarise_attributions/{task}.log",
    benchmark:
        "results/{name}/benchmarks/summarise_attributions/{task}.tsv"
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/summarise_attributions.py"


# Accuracy against cost of every quadrature rule on each task's trained model, against a
# converged reference (attnlab.stages.quadrature_study; benchmarks/quadrature.py runs it on more
# examples). Not on a task there for the cross-task correlation only (tasks.<name>.role).
rule quadrature_study:
    input:
        models=expand(rules.finetune.output.model, task=EVERY_STAGE_TASKS, allow_missing=True),
        devs=expand(rules.prepare_data.output.dev, task=EVERY_STAGE_TASKS, allow_missing=True),
    output:
        study="results/{name}/quadrature_study/study.json",
        figure=report(
            "results/{name}/quadrature_study/study.png",
            caption="../report/quadrature_study.rst",
            category="Attribution",
        ),
    params:
        **PARAMS.of("quadrature_study"),
    log:
        "results/{name}/logs/quadrature_study.log",
    benchmark:
        "results/{name}/benchmarks/quadrature_study.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/quadrature_study.py"
