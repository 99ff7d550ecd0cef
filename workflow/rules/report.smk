# Every record into one table, the figures and the report.
rule report:
    input:
        records=STUDY.records(),
        other_systems=STUDY.other_systems_records(),
        samples=STUDY.diffusion_samples(),
        sensitivity=STUDY.paths("gather_sensitivity"),
        assignments=STUDY.paths("cluster"),
    # update(): the last good report stays until this job succeeds, and is put back if it fails
    output:
        **{name: update(captioned(name)) for name in REPORT_FILES},
        **{name: update(f"{RESULTS}/{path}") for name, path in PAGE_FILES.items()},
    log:
        STUDY.log("report"),
    benchmark:
        STUDY.benchmark("report")
    conda:
        CONDA_ENV
    params:
        study=config["study"],
        system=config["system"],
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output.html)),
        calibration=json.dumps(
            {t: PTQ["calibration_limit"].get(t) for t in STUDY.ptq_tasks}
        ),
        bit_lists=json.dumps(PTQ.get("bit_lists", [])),
    shell:
        "accelstudy report --study {params.study:q} --system {params.system:q} "
        "--records {input.records:q} {input.other_systems:q} "
        "--sensitivity {input.sensitivity:q} --assignments {input.assignments:q} "
        "--calibration {params.calibration:q} --bit-lists {params.bit_lists:q} "
        "--results-dir {params.results:q} > {log:q} 2>&1"


# `snakemake compare`: one report across systems from the runs listed under compare.runs
# (their record files are the inputs: a run that gains records is compared again).
rule compare:
    input:
        STUDY.compare_inputs(),
    output:
        f"{COMPARE['out']}/report/index.html",
    log:
        f"{COMPARE['out']}/compare.log",
    benchmark:
        f"{COMPARE['out']}/compare.benchmark.tsv"
    conda:
        CONDA_ENV
    params:
        runs=COMPARE["runs"],
        reference=COMPARE["reference"] or "",
        out=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
    shell:
        "accelstudy compare {params.runs:q} --out {params.out:q} --reference {params.reference:q} "
        "> {log:q} 2>&1"
