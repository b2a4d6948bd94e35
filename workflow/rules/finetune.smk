rule finetune:
    input:
        train=rules.prepare_data.output.train,
        dev=rules.prepare_data.output.dev,
        # the local copy of model.pretrained (none for a model built from scratch)
        pretrained=PRETRAINED or [],
    output:
        model=directory("results/{name}/finetune/{task}/model"),
        metrics=report(
            "results/{name}/finetune/{task}/metrics.json",
            caption="../report/finetune.rst",
            category="Fine-tuning",
            labels={"task": "{task}"},
        ),
    params:
        task=task_spec,
        model=config["model"],
        finetune=task_finetune,
        seed=run_seed,
        device=config["device"],
        precision=config["precision"],
        code=code_version("training"),
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
