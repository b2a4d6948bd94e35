rule prepare_data:
    output:
        train="results/{name}/data/{task}/train.parquet",
        dev="results/{name}/data/{task}/dev.parquet",
        summary="results/{name}/data/{task}/summary.json",
    params:
        task=task_data,
        seed=config["seed"],
        code=code_version("tasks"),
    log:
        "results/{name}/logs/prepare_data/{task}.log",
    benchmark:
        "results/{name}/benchmarks/prepare_data/{task}.tsv"
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/prepare_data.py"
