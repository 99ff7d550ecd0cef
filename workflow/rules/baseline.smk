# The unquantized (FP32) model on every task, under every configured protocol: one job (one
# process, the model loaded once) per model, a record per task and protocol. update(): a job
# that fails puts back the records it had (a rerun for one task's setting loses no other's).
rule baseline:
    input:
        model=STUDY.output("prepare_model"),
        data=STUDY.eval_split_files,
        settings=STUDY.settings_stamp("baseline"),
    output:
        records=[update(path) for path in STUDY.covered("baseline")],
        per_item=[update(path) for path in STUDY.covered("baseline", "items")],
    log:
        STUDY.log("baseline"),
    benchmark:
        STUDY.benchmark("baseline")
    # one core for every task: started early, beside the scan, not left alone at the end
    priority: 1
    conda:
        CONDA_ENV
    resources:
        **STUDY.measuring_resources("baseline"),
    params:
        **STUDY.measuring_params("baseline"),
    shell:
        "OMP_NUM_THREADS={threads} accelstudy baseline --study {params.study:q} "
        "--system {params.system:q} --model-name {wildcards.model:q} "
        "--model-dir {input.model:q} --runs {params.runs:q} > {log:q} 2>&1"
