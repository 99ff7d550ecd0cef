# Every record into one table, the figures and the report.


rule report:
    input:
        records=STUDY.records(),
        samples=STUDY.diffusion_samples(),
        sensitivity=STUDY.sensitivity_tables(),
        assignments=STUDY.ptq_assignments(),
    output:
        html=f"{RESULTS}/report/index.html",
        markdown=f"{RESULTS}/report/report.md",
        records_csv=f"{RESULTS}/tables/records.csv",
        records_parquet=f"{RESULTS}/tables/records.parquet",
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
        table1=report(
            f"{RESULTS}/tables/table1.csv",
            caption="../report/table1.rst",
            category="PTQ",
        ),
        table1_published=report(
            f"{RESULTS}/tables/table1_published.csv",
            caption="../report/table1_published.rst",
            category="PTQ",
        ),
        fig1=report(
            f"{RESULTS}/report/figures/sensitivity.png",
            caption="../report/fig1.rst",
            category="PTQ",
        ),
        tradeoff=report(
            f"{RESULTS}/report/figures/tradeoff.png",
            caption="../report/tradeoff.rst",
            category="PTQ",
        ),
        finetune=report(
            f"{RESULTS}/tables/finetune.csv",
            caption="../report/finetune_table.rst",
            category="Fine-tuning",
        ),
        fig2a=report(
            f"{RESULTS}/report/figures/finetune_scaling.png",
            caption="../report/fig2a.rst",
            category="Fine-tuning",
        ),
        fig2b=report(
            f"{RESULTS}/report/figures/finetune_strategies.png",
            caption="../report/fig2b.rst",
            category="Fine-tuning",
        ),
        diffusion=report(
            f"{RESULTS}/tables/diffusion.csv",
            caption="../report/diffusion_table.rst",
            category="Diffusion",
        ),
        fig3=report(
            f"{RESULTS}/report/figures/diffusion_scaling.png",
            caption="../report/fig3.rst",
            category="Diffusion",
        ),
        samples_figure=report(
            f"{RESULTS}/report/figures/diffusion_samples.png",
            caption="../report/diffusion_samples.rst",
            category="Diffusion",
        ),
    log:
        f"{RESULTS}/logs/report.log",
    conda:
        CONDA_ENV
    params:
        study=config["study"],
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output.html)),
        calibration=json.dumps(
            {t: PTQ["calibration_limit"].get(t) for t in STUDY.ptq_tasks}
        ),
        bit_lists=json.dumps(PTQ.get("bit_lists", [])),
    shell:
        "accelstudy report --study {params.study} --records {input.records:q} "
        "--sensitivity {input.sensitivity:q} --assignments {input.assignments:q} "
        "--calibration {params.calibration:q} --bit-lists {params.bit_lists:q} "
        "--results-dir {params.results:q} > {log:q} 2>&1"


# `snakemake compare`: one report across systems from the runs listed under compare.runs
# (their record files are the inputs: a run that gains records is compared again).
rule compare:
    input:
        STUDY.compare_inputs(),
    output:
        f"{config['compare']['out']}/index.html",
    log:
        f"{config['compare']['out']}/compare.log",
    conda:
        CONDA_ENV
    params:
        runs=config["compare"]["runs"],
        reference=(
            f"--reference {config['compare']['reference']}"
            if config["compare"]["reference"]
            else ""
        ),
        out=lambda wildcards, output: os.path.dirname(output[0]),
    shell:
        "accelstudy compare {params.runs:q} --out {params.out:q} {params.reference} "
        "> {log:q} 2>&1"
