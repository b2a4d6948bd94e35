# Information flow (Hao et al. 2021 section 5): the attribution tree of every attributed dev
# example, read from the dumps, and per-example views of a few sampled examples.


rule trees:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        parts=rules.summarise_attributions.input.parts,
    output:
        edges="results/{name}/trees/{task}/edges.parquet",
        trees="results/{name}/trees/{task}/trees.parquet",
        claims="results/{name}/trees/{task}/claims.parquet",
        summary=report(
            "results/{name}/trees/{task}/summary.json",
            caption="../report/tree_summary.rst",
            category="Information flow",
            labels={"task": "{task}", "output": "tree sizes (numbers)"},
        ),
        sizes=report(
            "results/{name}/trees/{task}/sizes.png",
            caption="../report/tree_sizes.rst",
            category="Information flow",
            labels={"task": "{task}", "output": "tree sizes"},
        ),
        figures=report(
            directory("results/{name}/trees/{task}/figures"),
            patterns=["tree_{idx}.png"],
            caption="../report/tree_figures.rst",
            category="Information flow",
            labels={"task": "{task}", "output": "tree of example {idx}"},
        ),
    params:
        **PARAMS.of("trees"),
    log:
        "results/{name}/logs/trees/{task}.log",
    benchmark:
        "results/{name}/benchmarks/trees/{task}.tsv"
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/trees.py"


rule example_views:
    input:
        parts=rules.summarise_attributions.input.parts,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
        tree_figures=rules.trees.output.figures,
        # the explorer shows every method's maps of an example they scored
        scores=rules.interaction_methods.output.scores,
    output:
        views=report(
            directory("results/{name}/views/{task}"),
            patterns=["{page}.html"],
            caption="../report/example_views.rst",
            category="Information flow",
            # index: the attribution flow per token; explorer: any example, layer and head
            labels={"task": "{task}", "output": "example views: {page}"},
        ),
    params:
        **PARAMS.of("example_views"),
    log:
        "results/{name}/logs/example_views/{task}.log",
    benchmark:
        "results/{name}/benchmarks/example_views/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/example_views.py"
