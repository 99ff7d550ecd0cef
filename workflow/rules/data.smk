# Models and datasets, prepared once per study and cached under results/.
rule prepare_model:
    output:
        directory(STUDY.output("prepare_model")),
    log:
        STUDY.log("prepare_model"),
    benchmark:
        STUDY.benchmark("prepare_model")
    wildcard_constraints:
        model=STUDY.model_pattern(gguf=False),
    # every evaluation, scan and point waits for it: first, before a point takes both cores
    priority: 3
    conda:
        CONDA_ENV
    threads: 2
    resources:
        **STUDY.resources(minutes=60),
    params:
        spec=STUDY.model_spec,
        seed=STUDY.model_seed,
    shell:
        "OMP_NUM_THREADS={threads} accelstudy prepare-model --spec {params.spec:q} "
        "--seed {params.seed:q} --out {output:q} > {log:q} 2>&1"


# A GGUF is dequantized to safetensors as a batch job under a site profile (a large model needs
# a node's memory for it), not on the login node beside Snakemake as the other sources are.
# It keeps one core busy: 2 threads took 21 s as 1 did (SmolLM2's GGUF, AVX2), so it holds one.
use rule prepare_model as convert_gguf with:
    wildcard_constraints:
        model=STUDY.model_pattern(gguf=True),
    threads: 1


rule prepare_data:
    input:
        STUDY.local_file("tasks"),
    output:
        rows=STUDY.output("prepare_data"),
        source=STUDY.beside("prepare_data", "source"),
    log:
        STUDY.log("prepare_data"),
    benchmark:
        STUDY.benchmark("prepare_data")
    conda:
        CONDA_ENV
    resources:
        **STUDY.resources(minutes=30, mem_mb=4000),
    params:
        spec=STUDY.data_spec,
    shell:
        "accelstudy prepare-data --task {wildcards.task:q} --spec {params.spec:q} "
        "--split {wildcards.split:q} --out {output.rows:q} > {log:q} 2>&1"
