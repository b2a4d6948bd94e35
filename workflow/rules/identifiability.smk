# On Identifiability in Transformers (Brunner et al. 2020, docs/methods.md): effective
# attention, token identifiability and token mixing of each task's fine-tuned model, each
# with its tables, the paper's claims judged on them, and a figure.


rule effective_attention:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
    output:
        heads="results/{name}/identifiability/{task}/effective_attention.parquet",
        tokens="results/{name}/identifiability/{task}/attention_to_tokens.parquet",
        claims="results/{name}/identifiability/{task}/effective_attention_claims.parquet",
        figure=report(
            "results/{name}/identifiability/{task}/effective_attention.png",
            caption="../report/effective_attention.rst",
            category="Identifiability",
            labels={"task": "{task}", "analysis": "effective attention"},
        ),
    params:
        **PARAMS.of("effective_attention"),
    log:
        "results/{name}/logs/effective_attention/{task}.log",
    benchmark:
        "results/{name}/benchmarks/effective_attention/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/effective_attention.py"


rule token_identifiability:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        model=rules.finetune.output.model,
        train=rules.prepare_data.output.train,
        dev=rules.prepare_data.output.dev,
    output:
        sentences="results/{name}/identifiability/{task}/token_identifiability_sentences.parquet",
        rates="results/{name}/identifiability/{task}/token_identifiability.parquet",
        claims="results/{name}/identifiability/{task}/token_identifiability_claims.parquet",
        figure=report(
            "results/{name}/identifiability/{task}/token_identifiability.png",
            caption="../report/token_identifiability.rst",
            category="Identifiability",
            labels={"task": "{task}", "analysis": "token identifiability"},
        ),
    params:
        **PARAMS.of("token_identifiability"),
    log:
        "results/{name}/logs/token_identifiability/{task}.log",
    benchmark:
        "results/{name}/benchmarks/token_identifiability/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/token_identifiability.py"


rule token_mixing:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
    output:
        tokens="results/{name}/identifiability/{task}/token_mixing.parquet",
        offsets="results/{name}/identifiability/{task}/token_mixing_offsets.parquet",
        claims="results/{name}/identifiability/{task}/token_mixing_claims.parquet",
        figure=report(
            "results/{name}/identifiability/{task}/token_mixing.png",
            caption="../report/token_mixing.rst",
            category="Identifiability",
            labels={"task": "{task}", "analysis": "token mixing"},
        ),
    params:
        **PARAMS.of("token_mixing"),
    log:
        "results/{name}/logs/token_mixing/{task}.log",
    benchmark:
        "results/{name}/benchmarks/token_mixing/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/token_mixing.py"
