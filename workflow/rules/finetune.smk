# Part 2: fine-tuning sweeps. Scatter: one job per (model, strategy, attention, cards,
# repeat), asking the scheduler for exactly its cards (and nodes, beyond one node's cards).
rule prepare_instructions:
    input:
        STUDY.local_file("finetune"),
    output:
        rows=STUDY.output("prepare_instructions"),
        source=STUDY.beside("prepare_instructions", "source"),
    log:
        STUDY.log("prepare_instructions"),
    benchmark:
        STUDY.benchmark("prepare_instructions")
    conda:
        CONDA_ENV
    params:
        spec=json.dumps(config["finetune"]["data"], sort_keys=True),
    shell:
        "accelstudy prepare-instructions --spec {params.spec:q} --out {output.rows:q} "
        "> {log:q} 2>&1"


rule finetune:
    input:
        model=STUDY.output("prepare_model"),
        data=STUDY.output("prepare_instructions"),
        settings=STUDY.settings_stamp("finetune"),
    output:
        STUDY.output("finetune"),
    log:
        STUDY.log("finetune"),
    benchmark:
        STUDY.benchmark("finetune")
    conda:
        CONDA_ENV
    threads: STUDY.point_threads
    resources:
        **STUDY.point_resources("finetune"),
    params:
        **STUDY.measuring_params("finetune"),
    shell:
        "accelstudy finetune --study {params.study:q} --system {params.system:q} "
        "--model-name {wildcards.model:q} --model-dir {input.model:q} "
        "--point {params.point:q} --data-source {params.source:q} --threads {threads} "
        "--out {output:q} --params-digest {params.digest:q} > {log:q} 2>&1"
