# The unquantized (FP32) model on every task, under every configured protocol.
rule baseline:
    input:
        model=f"{RESULTS}/models/{{model}}",
        data=STUDY.eval_split_file,
    output:
        record=f"{MEASURED}/baseline/{{model}}/{{task}}/{{protocol}}.json",
        per_item=f"{MEASURED}/baseline/{{model}}/{{task}}/{{protocol}}.items.parquet",
    log:
        f"{MEASURED}/logs/baseline/{{model}}-{{task}}-{{protocol}}.log",
    benchmark:
        f"{MEASURED}/benchmarks/baseline/{{model}}/{{task}}/{{protocol}}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        **STUDY.measuring_resources("baseline"),
    params:
        study=config["study"],
        system=config["system"],
        settings=STUDY.eval_settings,
        limit=STUDY.task_value("limit"),
        source=STUDY.task_value("source"),
    shell:
        "OMP_NUM_THREADS={threads} accelstudy baseline --study {params.study:q} "
        "--system {params.system:q} --model-name {wildcards.model:q} "
        "--model-dir {input.model:q} --task {wildcards.task:q} --protocol {wildcards.protocol:q} "
        "--data {input.data:q} --data-source {params.source:q} --settings {params.settings:q} "
        "--limit {params.limit:q} --out {output.record:q} --items {output.per_item:q} > {log:q} 2>&1"
