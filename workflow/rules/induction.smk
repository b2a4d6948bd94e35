# Decoder language models on the planted induction task (docs/decoders.md): where AttAttr,
# raw attention and rollout point at the second A, which heads AttAttr ranks top, and what
# masking them costs (rule induction, on rule attribute's dumps); each ranking's top heads
# mean-ablated, on the model and on an untrained one of the same shape (rule induction_heads).


rule induction:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        # the attributions of the examples, full matrices (attribution.keep_full)
        parts=rules.summarise_attributions.input.parts,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
    output:
        edges="results/{name}/induction/{task}/edges.parquet",
        heads="results/{name}/induction/{task}/heads.parquet",
        claims="results/{name}/induction/{task}/claims.parquet",
        summary=report(
            "results/{name}/induction/{task}/summary.json",
            caption="../report/induction.rst",
            category="Induction",
            labels={"task": "{task}"},
        ),
    params:
        **PARAMS.of("induction"),
    log:
        "results/{name}/logs/induction/{task}.log",
    benchmark:
        "results/{name}/benchmarks/induction/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/induction.py"


rule induction_heads:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        # AttAttr's head ranking: the attributed examples' maximal attributions
        parts=rules.summarise_attributions.input.parts,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
    output:
        heads="results/{name}/induction_heads/{task}/heads.parquet",
        ablation="results/{name}/induction_heads/{task}/ablation.parquet",
        claims="results/{name}/induction_heads/{task}/claims.parquet",
        summary="results/{name}/induction_heads/{task}/summary.json",
        # the control: the same on an untrained model of the same shape
        untrained_heads="results/{name}/induction_heads/{task}/untrained/heads.parquet",
        untrained_ablation="results/{name}/induction_heads/{task}/untrained/ablation.parquet",
        page=report(
            "results/{name}/induction_heads/{task}/heads.html",
            caption="../report/induction_heads.rst",
            category="Induction heads",
            labels={"task": "{task}"},
        ),
    params:
        **PARAMS.of("induction_heads"),
    log:
        "results/{name}/logs/induction_heads/{task}.log",
    benchmark:
        "results/{name}/benchmarks/induction_heads/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/induction_heads.py"
