# The run's own pages of the report: a run summary, the claims of every stage and every figure
# with its caption. Their inputs are found by name, not listed (benchmarks_by_rule,
# claims_tables, report_figures in common.smk), so a new stage's times, claims and figures reach
# the report without a change here. The times are the run's
# own; a control run's are in results/<name>/control=<control>/benchmarks/.

rule run_summary:
    input:
        unpack(benchmarks_by_rule),
        finetune_metrics=expand(rules.finetune.output.metrics, name=[*RUNS, *CONTROLS],
                                task=TASKS),
    output:
        page=report(
            "results/{name}/report/run_summary.html",
            caption="../report/run_summary.rst",
            category="Run summary",
        ),
    params:
        **PARAMS.of("run_summary"),
    log:
        "results/{name}/logs/run_summary.log",
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/run_summary.py"


rule claims:
    input:
        claims=claims_tables,
        # the same claims of each control run (config `controls`), set beside the run's
        controls=control_claims_tables,
    output:
        page=report(
            "results/{name}/report/claims.html",
            caption="../report/claims.rst",
            category="Claims",
        ),
        # the findings the report's first page (workflow/report/workflow.rst) includes, and
        # the table they are built from (read by `python -m attnlab.report.findings`)
        landing="results/{name}/report/landing.html",
        table="results/{name}/report/findings.parquet",
    params:
        **PARAMS.of("claims"),
    log:
        "results/{name}/logs/claims.log",
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/claims.py"


rule figures:
    input:
        figures=report_figure_files,
    output:
        page=report(
            "results/{name}/report/figures.html",
            caption="../report/figures.rst",
            category="Figures with captions",
        ),
    params:
        **PARAMS.of("figures", figures=report_figures),
    log:
        "results/{name}/logs/figures.log",
    threads: 1
    conda:
        "../../envs/attnlab.yaml"
    script:
        "../scripts/figures.py"
