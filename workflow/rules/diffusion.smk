# Part 3: SR3 diffusion super-resolution of dust images, strong scaling over devices.
# One dataset; one job per (devices, repeat), asking the scheduler for exactly its devices.
rule prepare_dust:
    input:
        STUDY.local_file("diffusion"),
    output:
        pairs=STUDY.output("prepare_dust"),
        card=STUDY.output("prepare_dust.card"),
        source=STUDY.beside("prepare_dust", "source"),
    log:
        STUDY.log("prepare_dust"),
    benchmark:
        STUDY.benchmark("prepare_dust")
    conda:
        CONDA_ENV
    params:
        spec=json.dumps(config["diffusion"]["data"], sort_keys=True),
        seed=config["seed"],
    shell:
        "accelstudy prepare-dust --spec {params.spec:q} --seed {params.seed:q} "
        "--out {output.pairs:q} --card {output.card:q} > {log:q} 2>&1"


rule diffusion:
    input:
        pairs=STUDY.output("prepare_dust"),
        card=STUDY.output("prepare_dust.card"),
        settings=STUDY.settings_stamp("diffusion"),
    output:
        record=STUDY.output("diffusion"),
        samples=STUDY.beside("diffusion", "samples"),
    log:
        STUDY.log("diffusion"),
    benchmark:
        STUDY.benchmark("diffusion")
    conda:
        CONDA_ENV
    threads: STUDY.point_threads
    resources:
        **STUDY.point_resources("diffusion"),
    params:
        **STUDY.measuring_params("diffusion"),
    shell:
        "accelstudy diffusion --study {params.study:q} --system {params.system:q} "
        "--point {params.point:q} --data {input.pairs:q} --card {input.card:q} "
        "--threads {threads} --out {output.record:q} --samples {output.samples:q} "
        "--params-digest {params.digest:q} > {log:q} 2>&1"
