# Adversarial triggers (Hao et al. 2021 section 6): patterns mined from the attributions of
# source examples, ranked per class, and inserted into every dev example of the task.


rule mine_triggers:
    input:
        model=rules.finetune.output.model,
        source=getattr(rules.prepare_data.output, config["triggers"]["source_split"]),
    output:
        # the attribution dump of the source examples (schema: src/attnlab/data/dumps.py)
        source="results/{name}/triggers/{task}/source.parquet",
        patterns="results/{name}/triggers/{task}/patterns.parquet",
        triggers="results/{name}/triggers/{task}/triggers.parquet",
    params:
        **PARAMS.of("mine_triggers"),
    log:
        "results/{name}/logs/mine_triggers/{task}.log",
    benchmark:
        "results/{name}/benchmarks/mine_triggers/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/mine_triggers.py"


rule attack_eval:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
        triggers=rules.mine_triggers.output.triggers,
        patterns=rules.mine_triggers.output.patterns,
        source=rules.mine_triggers.output.source,
    output:
        table="results/{name}/triggers/{task}/attack.parquet",
        claims="results/{name}/triggers/{task}/claims.parquet",
        figure=report(
            "results/{name}/triggers/{task}/attack.png",
            caption="../report/attack.rst",
            category="Adversarial triggers",
            labels={"task": "{task}"},
        ),
    params:
        **PARAMS.of("attack_eval"),
    log:
        "results/{name}/logs/attack_eval/{task}.log",
    benchmark:
        "results/{name}/benchmarks/attack_eval/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/attack_eval.py"
