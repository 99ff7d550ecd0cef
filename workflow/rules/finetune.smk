# Part 2: fine-tuning sweeps. Scatter: one job per (model, strategy, attention, cards,
# repeat), asking the scheduler for exactly its cards (and nodes, beyond one node's cards).
rule prepare_instructions:
    input:
        STUDY.local_file("finetune"),
    output:
        rows=f"{RESULTS}/data/instructions/train.jsonl",
        source=f"{RESULTS}/data/instructions/train.source.json",
    log:
        f"{RESULTS}/logs/prepare_data/instructions.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_instructions.tsv"
    conda:
        CONDA_ENV
    params:
        spec=json.dumps(config["finetune"]["data"], sort_keys=True),
    shell:
        "accelstudy prepare-instructions --spec {params.spec:q} --out {output.rows:q} "
        "> {log:q} 2>&1"


rule finetune:
    input:
        model=f"{RESULTS}/models/{{model}}",
        data=f"{RESULTS}/data/instructions/train.jsonl",
    output:
        f"{MEASURED}/finetune/{{model}}/{{strategy}}/{{attention}}/cards-{{cards}}/repeat-{{repeat}}.json",
    log:
        f"{MEASURED}/logs/finetune/{{model}}-{{strategy}}-{{attention}}-{{cards}}-{{repeat}}.log",
    benchmark:
        f"{MEASURED}/benchmarks/finetune/{{model}}/{{strategy}}/{{attention}}/cards-{{cards}}/repeat-{{repeat}}.tsv"
    conda:
        CONDA_ENV
    threads: STUDY.point_threads
    resources:
        **STUDY.point_resources("finetune"),
    params:
        study=config["study"],
        system=config["system"],
        point=STUDY.finetune_point,
        source=config["finetune"]["data"]["source"],
    shell:
        "accelstudy finetune --study {params.study:q} --system {params.system:q} "
        "--model-name {wildcards.model:q} --model-dir {input.model:q} "
        "--point {params.point:q} --data-source {params.source:q} --threads {threads} "
        "--out {output:q} > {log:q} 2>&1"
