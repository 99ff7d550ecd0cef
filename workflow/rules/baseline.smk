# The unquantized (FP32) model on every task, under every configured protocol.
rule baseline:
    input:
        model=f"{RESULTS}/models/{{model}}",
        data=STUDY.eval_split_file,
    output:
        f"{RESULTS}/baseline/{{model}}/{{task}}/{{protocol}}.json",
    log:
        f"{RESULTS}/logs/baseline/{{model}}-{{task}}-{{protocol}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/baseline/{{model}}/{{task}}/{{protocol}}.tsv"
    conda:
        CONDA_ENV
    threads: 1
    resources:
        **STUDY.resources(minutes=120),
    params:
        study=config["study"],
        system=config["system"],
        settings=STUDY.eval_settings,
        limit=STUDY.task_value("limit"),
        source=STUDY.task_value("source"),
    shell:
        "OMP_NUM_THREADS={threads} accelstudy baseline --study {params.study} "
        "--system {params.system} --model-name {wildcards.model} "
        "--model-dir {input.model:q} --task {wildcards.task} --protocol {wildcards.protocol} "
        "--data {input.data:q} --data-source {params.source} --settings {params.settings:q} "
        "--limit {params.limit} --out {output:q} > {log:q} 2>&1"
