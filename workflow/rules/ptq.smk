# Part 1: sensitivity-aware mixed-precision PTQ. Scatter: one sensitivity job per chunk of
# layers; one clustering job per bit list; one quantized evaluation per (bit list, recipe).
# Evaluation jobs take one core each locally (site profiles set their threads): two at once
# overlap their single-threaded start-up; the scan, on the longest chain, starts first.
rule sensitivity:
    input:
        model=f"{RESULTS}/models/{{model}}",
        data=STUDY.calibration_file,
    output:
        f"{RESULTS}/ptq/{{model}}/{{task}}/sensitivity/{{granularity}}/chunk-{{chunk}}.json",
    log:
        f"{RESULTS}/logs/sensitivity/{{model}}-{{task}}-{{granularity}}-{{chunk}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sensitivity/{{model}}-{{task}}-{{granularity}}-{{chunk}}.tsv"
    priority: 1
    conda:
        CONDA_ENV
    threads: 1
    resources:
        **STUDY.measuring_resources("sensitivity"),
    params:
        settings=STUDY.paper_settings,
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
        f"{RESULTS}/ptq/{{model}}/{{task}}/sensitivity/{{granularity}}.csv",
    log:
        f"{RESULTS}/logs/sensitivity/{{model}}-{{task}}-{{granularity}}-gather.log",
    benchmark:
        f"{RESULTS}/benchmarks/gather_sensitivity/{{model}}-{{task}}-{{granularity}}.tsv"
    conda:
        CONDA_ENV
    shell:
        "accelstudy gather-sensitivity --chunks {input:q} --out {output:q} > {log:q} 2>&1"


rule cluster:
    input:
        table=f"{RESULTS}/ptq/{{model}}/{{task}}/sensitivity/{{granularity}}.csv",
        model=f"{RESULTS}/models/{{model}}",
    output:
        f"{RESULTS}/ptq/{{model}}/{{task}}/{{granularity}}/bits-{{bits}}/assignment.json",
    log:
        f"{RESULTS}/logs/cluster/{{model}}-{{task}}-{{granularity}}-{{bits}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/cluster/{{model}}-{{task}}-{{granularity}}-{{bits}}.tsv"
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
        model=f"{RESULTS}/models/{{model}}",
        data=STUDY.eval_split_file,
        assignment=f"{RESULTS}/ptq/{{model}}/{{task}}/{{granularity}}/bits-{{bits}}/assignment.json",
        calibration=STUDY.calibration_file,
    output:
        record=f"{MEASURED}/ptq/{{model}}/{{task}}/{{granularity}}/bits-{{bits}}/{{recipe}}.json",
        per_item=f"{MEASURED}/ptq/{{model}}/{{task}}/{{granularity}}/bits-{{bits}}/{{recipe}}.items.parquet",
    log:
        f"{MEASURED}/logs/quantize/{{model}}-{{task}}-{{granularity}}-{{bits}}-{{recipe}}.log",
    benchmark:
        f"{MEASURED}/benchmarks/quantize/{{model}}/{{task}}/{{granularity}}/bits-{{bits}}/{{recipe}}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        **STUDY.measuring_resources("quantize"),
    params:
        study=config["study"],
        system=config["system"],
        settings=STUDY.paper_settings,
        limit=STUDY.task_value("limit"),
        source=STUDY.task_value("source"),
        group_size=PTQ["group_size"],
        symmetric=str(PTQ["symmetric"]).lower(),
        fp8=STUDY.fp8_flags,
    shell:
        "OMP_NUM_THREADS={threads} accelstudy quantize --study {params.study:q} "
        "--system {params.system:q} --model-name {wildcards.model:q} --task {wildcards.task:q} "
        "--data-source {params.source:q} --recipe {wildcards.recipe:q} "
        "--model-dir {input.model:q} --data {input.data:q} --settings {params.settings:q} "
        "--limit {params.limit:q} --assignment {input.assignment:q} "
        "--group-size {params.group_size:q} --symmetric {params.symmetric:q} "
        "--calibration {input.calibration:q} {params.fp8} --out {output.record:q} "
        "--items {output.per_item:q} > {log:q} 2>&1"
