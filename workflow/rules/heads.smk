# Head importance and pruning (Hao et al. 2021 section 4): every head of a task's model is
# scored by each configured method, pruned per layer and globally, and the paper's claims are
# judged on the curves; attribution importance is then correlated across tasks.


rule head_importance:
    input:
        parts=rules.summarise_attributions.input.parts,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
    output:
        importance="results/{name}/heads/{task}/importance.parquet",
    params:
        **PARAMS.of("head_importance"),
    log:
        "results/{name}/logs/head_importance/{task}.log",
    benchmark:
        "results/{name}/benchmarks/head_importance/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/head_importance.py"


rule prune_eval:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        parts=rules.summarise_attributions.input.parts,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
        importance=rules.head_importance.output.importance,
    output:
        per_layer="results/{name}/heads/{task}/per_layer.parquet",
        global_="results/{name}/heads/{task}/global.parquet",
        claims="results/{name}/heads/{task}/claims.parquet",
    params:
        **PARAMS.of("prune_eval"),
    log:
        "results/{name}/logs/prune_eval/{task}.log",
    benchmark:
        "results/{name}/benchmarks/prune_eval/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/prune_eval.py"


# The pruning curves of every task that runs every stage (tasks.<name>.role).
rule pruning_figures:
    input:
        per_layer=expand(rules.prune_eval.output.per_layer, task=EVERY_STAGE_TASKS,
                         allow_missing=True),
        global_=expand(rules.prune_eval.output.global_, task=EVERY_STAGE_TASKS,
                       allow_missing=True),
        # the gold label's leak, drawn on the per-layer curves
        claims=expand(rules.prune_eval.output.claims, task=EVERY_STAGE_TASKS,
                      allow_missing=True),
    output:
        per_layer=report(
            "results/{name}/heads/pruning_per_layer.png",
            caption="../report/pruning_per_layer.rst",
            category="Head importance",
        ),
        global_=report(
            "results/{name}/heads/pruning_global.png",
            caption="../report/pruning_global.rst",
            category="Head importance",
        ),
    params:
        **PARAMS.of("pruning_figures"),
    log:
        "results/{name}/logs/pruning_figures.log",
    benchmark:
        "results/{name}/benchmarks/pruning_figures.tsv"
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/pruning_figures.py"


rule task_correlation:
    input:
        # whether the models learned their tasks (the findings' rule, claims.on_models)
        finetune_metrics=expand(rules.finetune.output.metrics, task=TASKS, allow_missing=True),
        importance=expand(
            rules.head_importance.output.importance, task=TASKS, allow_missing=True
        ),
        ceiling=next_seed_importance,
    output:
        table="results/{name}/heads/task_correlation.parquet",
        claims="results/{name}/heads/task_correlation_claims.parquet",
        figure=report(
            "results/{name}/heads/task_correlation.png",
            caption="../report/task_correlation.rst",
            category="Head importance",
        ),
    params:
        **PARAMS.of("task_correlation"),
    log:
        "results/{name}/logs/task_correlation.log",
    benchmark:
        "results/{name}/benchmarks/task_correlation.tsv"
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/task_correlation.py"
