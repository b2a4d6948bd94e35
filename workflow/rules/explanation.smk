# Is attention explanation? (Jain & Wallace 2019, Drozdyuk et al., docs/methods.md): attention
# permutation (with attention's token ranking against gradient and leave-one-out importance),
# adversarial keys and adversarial attention on each task's fine-tuned model, each with its
# tables, the claims judged on them, and a figure.


rule attention_permutation:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
    output:
        table="results/{name}/explanation/{task}/attention_permutation.parquet",
        ranking="results/{name}/explanation/{task}/attention_ranking.parquet",
        claims="results/{name}/explanation/{task}/attention_permutation_claims.parquet",
        figure=report(
            "results/{name}/explanation/{task}/attention_permutation.png",
            caption="../report/attention_permutation.rst",
            category="Attention as explanation",
            labels={"task": "{task}", "analysis": "attention permutation"},
        ),
    params:
        **PARAMS.of("attention_permutation"),
    log:
        "results/{name}/logs/attention_permutation/{task}.log",
    benchmark:
        "results/{name}/benchmarks/attention_permutation/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/attention_permutation.py"


rule adversarial_attention:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        model=rules.finetune.output.model,
        train=rules.prepare_data.output.train,
        dev=rules.prepare_data.output.dev,
    output:
        key_table="results/{name}/explanation/{task}/adversarial_keys.parquet",
        attention_table="results/{name}/explanation/{task}/adversarial_attention.parquet",
        claims="results/{name}/explanation/{task}/adversarial_claims.parquet",
        figure=report(
            "results/{name}/explanation/{task}/adversarial.png",
            caption="../report/adversarial.rst",
            category="Attention as explanation",
            labels={"task": "{task}", "analysis": "adversarial keys and attention"},
        ),
    params:
        **PARAMS.of("adversarial_attention"),
    log:
        "results/{name}/logs/adversarial_attention/{task}.log",
    benchmark:
        "results/{name}/benchmarks/adversarial_attention/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/adversarial_attention.py"
