# Every record into one table, the figures and the report.


rule report:
    input:
        records=baseline_records() + ptq_records(),
        figures=ptq_figures(),
    output:
        html=f"{RESULTS}/report/index.html",
        markdown=f"{RESULTS}/report/report.md",
        records_csv=f"{RESULTS}/tables/records.csv",
        records_parquet=f"{RESULTS}/tables/records.parquet",
        table1=f"{RESULTS}/tables/table1.csv",
        baseline=report(
            f"{RESULTS}/tables/baseline.csv",
            caption="../report/baseline_table.rst",
            category="Baseline",
        ),
        figure=report(
            f"{RESULTS}/report/figures/baseline.png",
            caption="../report/baseline_figure.rst",
            category="Baseline",
        ),
    log:
        f"{RESULTS}/logs/report.log",
    conda:
        CONDA_ENV
    params:
        study=config["study"],
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output.html)),
    shell:
        "accelstudy report --study {params.study} --records {input.records:q} "
        "--figures {input.figures:q} "
        "--results-dir {params.results:q} > {log:q} 2>&1"
