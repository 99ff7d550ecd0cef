# Part 1: sensitivity-aware mixed-precision PTQ. Scatter: one sensitivity job per chunk of
# layers; one clustering job per bit list; one quantized evaluation job per bit list, a record
# per recipe (each recipe's model is its own: quantized from a fresh load, in one process).
# Evaluation jobs take one core each locally (site profiles set their threads): two at once
# overlap their single-threaded start-up; the scan, on the longest chain, starts first.
rule sensitivity:
    input:
        model=STUDY.output("prepare_model"),
        data=STUDY.calibration_file,
    output:
        STUDY.output("sensitivity"),
    log:
        STUDY.log("sensitivity"),
    benchmark:
        STUDY.benchmark("sensitivity")
    priority: 1
    conda:
        CONDA_ENV
    resources:
        **STUDY.measuring_resources("sensitivity"),
    params:
        settings=STUDY.scan_settings,
        limit=STUDY.calibration_limit,
        family=PTQ["family"],
        sparsity=PTQ["sparsity"],
        chunks=PTQ["chunks"],
        prefix_reuse=str(PTQ["prefix_reuse"]).lower(),
    shell:
        "OMP_NUM_THREADS={threads} accelstudy sensitivity --model-dir {input.model:q} "
        "--task {wildcards.task:q} --data {input.data:q} --limit {params.limit:q} "
        "--settings {params.settings:q} --granularity {wildcards.granularity:q} "
        "--family {params.family:q} --sparsity {params.sparsity:q} --chunks {params.chunks:q} "
        "--chunk {wildcards.chunk:q} --prefix-reuse {params.prefix_reuse:q} "
        "--out {output:q} > {log:q} 2>&1"


rule gather_sensitivity:
    input:
        STUDY.sensitivity_chunks,
    output:
        STUDY.output("gather_sensitivity"),
    log:
        STUDY.log("gather_sensitivity"),
    benchmark:
        STUDY.benchmark("gather_sensitivity")
    conda:
        CONDA_ENV
    shell:
        "accelstudy gather-sensitivity --chunks {input:q} --out {output:q} > {log:q} 2>&1"


rule cluster:
    input:
        table=STUDY.output("gather_sensitivity"),
        model=STUDY.output("prepare_model"),
    output:
        STUDY.output("cluster"),
    log:
        STUDY.log("cluster"),
    benchmark:
        STUDY.benchmark("cluster")
    conda:
        CONDA_ENV
    params:
        bits=lambda wildcards: json.dumps([int(b) for b in wildcards.bits.split("-")]),
        method=PTQ["clustering"],
        remainder=STUDY.ptq_remainder,
    shell:
        "accelstudy cluster --table {input.table:q} --bits {params.bits:q} "
        "--method {params.method:q} --remainder {params.remainder:q} "
        "--model-dir {input.model:q} --out {output:q} > {log:q} 2>&1"


rule quantize:
    input:
        model=STUDY.output("prepare_model"),
        data=STUDY.eval_split_file,
        assignment=STUDY.output("cluster"),
        calibration=STUDY.calibration_file,
        settings=STUDY.settings_stamp("quantize"),
    # update(): a job that fails puts back the records it had
    output:
        records=[update(path) for path in STUDY.covered("quantize")],
        per_item=[update(path) for path in STUDY.covered("quantize", "items")],
    log:
        STUDY.log("quantize"),
    benchmark:
        STUDY.benchmark("quantize")
    conda:
        CONDA_ENV
    resources:
        **STUDY.measuring_resources("quantize"),
    params:
        **STUDY.measuring_params("quantize"),
    shell:
        "OMP_NUM_THREADS={threads} accelstudy quantize --study {params.study:q} "
        "--system {params.system:q} --model-name {wildcards.model:q} --task {wildcards.task:q} "
        "--data-source {params.source:q} --model-dir {input.model:q} --data {input.data:q} "
        "--settings {params.settings:q} --limit {params.limit:q} "
        "--assignment {input.assignment:q} --group-size {params.group_size:q} "
        "--symmetric {params.symmetric:q} --calibration {input.calibration:q} {params.recipe_flags} "
        "--runs {params.runs:q} > {log:q} 2>&1"
