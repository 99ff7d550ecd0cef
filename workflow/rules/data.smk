# Models and datasets, prepared once per study and cached under results/.


rule prepare_model:
    output:
        directory(f"{RESULTS}/models/{{model}}"),
    params:
        spec=model_spec,
        seed=model_seed,
    log:
        f"{RESULTS}/logs/prepare_model/{{model}}.log",
    threads: 2
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "OMP_NUM_THREADS={threads} accelstudy prepare-model --spec {params.spec:q} "
        "--seed {params.seed} --out {output:q} > {log:q} 2>&1"


rule prepare_data:
    output:
        f"{RESULTS}/data/{{task}}/{{split}}.jsonl",
    params:
        spec=data_spec,
    log:
        f"{RESULTS}/logs/prepare_data/{{task}}-{{split}}.log",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../../envs/cpu.yaml"
    shell:
        "accelstudy prepare-data --task {wildcards.task} --spec {params.spec:q} "
        "--split {wildcards.split} --out {output:q} > {log:q} 2>&1"
