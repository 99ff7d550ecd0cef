# Part 3: SR3 diffusion super-resolution of dust images, strong scaling over devices.
# One dataset; one job per (devices, repeat), asking the scheduler for exactly its devices.
rule prepare_dust:
    input:
        STUDY.local_file("diffusion"),
    output:
        pairs=f"{RESULTS}/data/dust/pairs.npz",
        card=f"{RESULTS}/data/dust/card.json",
        source=f"{RESULTS}/data/dust/pairs.source.json",
    log:
        f"{RESULTS}/logs/prepare_data/dust.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_dust.tsv"
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
        pairs=f"{RESULTS}/data/dust/pairs.npz",
        card=f"{RESULTS}/data/dust/card.json",
    output:
        record=f"{MEASURED}/diffusion/devices-{{devices}}/repeat-{{repeat}}.json",
        samples=f"{MEASURED}/diffusion/devices-{{devices}}/repeat-{{repeat}}.samples.npz",
    log:
        f"{MEASURED}/logs/diffusion/devices-{{devices}}-{{repeat}}.log",
    benchmark:
        f"{MEASURED}/benchmarks/diffusion/devices-{{devices}}/repeat-{{repeat}}.tsv"
    conda:
        CONDA_ENV
    threads: STUDY.point_threads
    resources:
        **STUDY.point_resources("diffusion"),
    params:
        study=config["study"],
        system=config["system"],
        point=STUDY.diffusion_point,
    shell:
        "accelstudy diffusion --study {params.study:q} --system {params.system:q} "
        "--point {params.point:q} --data {input.pairs:q} --card {input.card:q} "
        "--threads {threads} --out {output.record:q} --samples {output.samples:q} "
        "> {log:q} 2>&1"
