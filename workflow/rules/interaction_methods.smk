# Which explanation finds the interaction? (docs/interaction_methods.md) Every method's token-pair
# scores of each task's attributed examples, beside the dumps; their planted-pair recovery, edge
# deletion and token erasure on the trained and an untrained model, with bootstrap intervals, a
# leaderboard, three figures and the claims judged on them.


rule interaction_methods:
    input:
        # whether the model learned its task (the findings' rule, claims.on_models)
        finetune_metrics=rules.finetune.output.metrics,
        model=rules.finetune.output.model,
        dev=rules.prepare_data.output.dev,
        parts=rules.summarise_attributions.input.parts,
    output:
        scores="results/{name}/interaction_scores/task={task}/part.parquet",
        ground_truth="results/{name}/interaction_methods/{task}/ground_truth.parquet",
        deletion="results/{name}/interaction_methods/{task}/deletion.parquet",
        erasure="results/{name}/interaction_methods/{task}/erasure.parquet",
        intervals="results/{name}/interaction_methods/{task}/intervals.parquet",
        pairs="results/{name}/interaction_methods/{task}/pairs.parquet",
        claims="results/{name}/interaction_methods/{task}/claims.parquet",
        leaderboard=report(
            "results/{name}/interaction_methods/{task}/leaderboard.html",
            caption="../report/interaction_leaderboard.rst",
            category="Interaction methods",
            labels={"task": "{task}", "output": "leaderboard"},
        ),
        ground_truth_figure=report(
            "results/{name}/interaction_methods/{task}/ground_truth.png",
            caption="../report/interaction_ground_truth.rst",
            category="Interaction methods",
            labels={"task": "{task}", "output": "planted ground truth"},
        ),
        deletion_figure=report(
            "results/{name}/interaction_methods/{task}/deletion.png",
            caption="../report/interaction_deletion.rst",
            category="Interaction methods",
            labels={"task": "{task}", "output": "deletion curves"},
        ),
        leaderboard_figure=report(
            "results/{name}/interaction_methods/{task}/leaderboard.png",
            caption="../report/interaction_intervals.rst",
            category="Interaction methods",
            labels={"task": "{task}", "output": "leaderboard with intervals"},
        ),
    params:
        **PARAMS.of("interaction_methods"),
    log:
        "results/{name}/logs/interaction_methods/{task}.log",
    benchmark:
        "results/{name}/benchmarks/interaction_methods/{task}.tsv"
    threads: 1
    resources:
        gpu=GPU,
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/interaction_methods.py"
