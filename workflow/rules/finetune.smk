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
            **config_paths("model.scratch", "model.max_length", "model.pretrain", "device",
                           "precision",
                           # every task's columns, in the order of the input train
                           *(f"tasks.{task}.{key}" for task in TASKS
                             for key in ("text_fields", "label_names", "label_field"))),
            seed=run_seed,
            code=code_version("stages.pretrain"),
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
        **config_paths("model", "device", "precision"),
        task=task_spec,
        # a merged view, not a config path: the top-level finetune settings with the task's
        # own (tasks.<task>.finetune) on top, read by the stage as job.settings.finetune
        finetune=task_finetune,
        seed=run_seed,
        # a control run's model: the untrained one fine-tuning starts from (config controls)
        control=run_control,
        code=code_version("stages.finetune"),
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
