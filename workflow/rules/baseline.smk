# The unquantized (FP32) model on every task, under every configured protocol.
rule baseline:
    input:
        model=STUDY.output("prepare_model"),
        data=STUDY.eval_split_file,
        settings=STUDY.settings_stamp("baseline"),
    output:
        record=STUDY.output("baseline"),
        per_item=STUDY.beside("baseline", "items"),
    log:
        STUDY.log("baseline"),
    benchmark:
        STUDY.benchmark("baseline")
    conda:
        CONDA_ENV
    resources:
        **STUDY.measuring_resources("baseline"),
    params:
        **STUDY.measuring_params("baseline"),
    shell:
        "OMP_NUM_THREADS={threads} accelstudy baseline --study {params.study:q} "
        "--system {params.system:q} --model-name {wildcards.model:q} "
        "--model-dir {input.model:q} --task {wildcards.task:q} --protocol {wildcards.protocol:q} "
        "--data {input.data:q} --data-source {params.source:q} --settings {params.settings:q} "
        "--limit {params.limit:q} --out {output.record:q} --items {output.per_item:q} "
        "--params-digest {params.digest:q} > {log:q} 2>&1"
