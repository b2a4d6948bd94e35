# model.pretrain: the starting point every task's scratch model is fine-tuned from (one
# vocabulary and one masked-LM model over all tasks), so that heads compare across tasks.
# The rule exists only then: the run summary gathers the benchmark of every rule there is.
if config["model"]["pretrain"]["epochs"]:

    rule pretrain:
        input:
            train=expand(rules.prepare_data.output.train, task=TASKS, allow_missing=True),
        output:
            model=directory("results/{name}/pretrain/model"),
            metrics="results/{name}/pretrain/metrics.json",
        params:
            **PARAMS.of("pretrain"),
        log:
            "results/{name}/logs/pretrain.log",
        benchmark:
            "results/{name}/benchmarks/pretrain.tsv"
        threads: 1
        resources:
            gpu=GPU,
        conda:
            "../../envs/attnlab.yaml"
        script:
            "../scripts/pretrain.py"


rule finetune:
    input:
        train=rules.prepare_data.output.train,
        dev=rules.prepare_data.output.dev,
        # the local copy of model.pretrained (none for a model built from scratch)
        pretrained=PRETRAINED or [],
        # the shared starting point of scratch models (none without model.pretrain)
        start=rules.pretrain.output.model if config["model"]["pretrain"]["epochs"] else [],
    output:
        model=directory("results/{name}/finetune/{task}/model"),
        metrics=report(
            "results/{name}/finetune/{task}/metrics.json",
            caption="../report/finetune.rst",
            category="Fine-tuning",
            labels={"task": "{task}"},
        ),
    params:
        **PARAMS.of("finetune"),
    log:
        "results/{name}/logs/finetune/{task}.log",
    benchmark:
        "results/{name}/benchmarks/finetune/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/finetune.py"
