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
        # the dumps' engine and edges; target and example count come from triggers (the source
        # split is the input's)
        **config_paths("triggers.source_examples", "triggers.target", "triggers.score_threshold",
                       "triggers.second_pair_ratio", *ENGINE, "attribution.top_pairs",
                       "attribution.edge_min_fraction", "attribution.max_edges_per_layer",
                       *MODEL_JOB),
        task=task_data,
        code=code_version("stages.mine_triggers"),
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
        **config_paths("triggers.top", "triggers.random_draws", "triggers.batch_size",
                       *MODEL_JOB),
        # the data settings too: the figure names a synthetic task's planted triggers
        task=task_data,
        seed=run_seed,
        code=code_version("stages.attack_eval"),
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
