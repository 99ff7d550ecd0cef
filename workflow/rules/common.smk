# Config validation and input functions shared by all rules.
import json
import os
from pathlib import Path

from accelstudy.config import ConfigError, load_system, validate_config
from accelstudy.evaluate.runner import relevant_settings
from accelstudy.diffusion.points import points as diffusion_points
from accelstudy.finetune.sweep import nodes_for, points as sweep_points
from accelstudy.paths import export_for_jobs
from accelstudy.site import check_profile

try:
    validate_config(config)
    SYSTEM = load_system(config["system"])
    check_profile(config, SYSTEM, workflow.resource_settings, os.environ)
except ConfigError as error:
    # one line naming the key and the fix, not a traceback
    raise SystemExit(f"Error: {error}")


export_for_jobs(os.environ)


# `--software-deployment-method conda` builds the environment the system's device needs
# (Gaudi runs in its container instead: envs/gaudi/Dockerfile).
CONDA_ENV = {"cuda": "../../envs/cuda.yaml"}.get(
    SYSTEM["device"], "../../envs/cpu.yaml"
)


# Small CPU jobs run beside Snakemake (a login node under SLURM), not as batch jobs.
localrules:
    prepare_model,
    prepare_data,
    prepare_instructions,
    prepare_dust,
    gather_sensitivity,
    cluster,
    report,
    compare,


RESULTS = f"{config['results_dir']}/{config['study']}"
MODELS = sorted(config["models"])
# models only fine-tuned (evaluate: false) get no baseline or PTQ jobs
EVAL_MODELS = [m for m in MODELS if config["models"][m]["evaluate"]]
TASKS = sorted(config["tasks"])
EVAL_UNITS = [
    (model, task, protocol)
    for model in EVAL_MODELS
    for task in TASKS
    for protocol in config["tasks"][task]["protocols"]
]


PTQ = config["ptq"]
CALIBRATION_SPLIT = {"wikitext": "validation", "hellaswag": "train", "boolq": "train"}
PTQ_TASKS = [t for t in PTQ.get("tasks", []) if PTQ["enabled"]]
BIT_LABELS = ["-".join(str(b) for b in bits) for bits in PTQ.get("bit_lists", [])]


wildcard_constraints:
    model="|".join(MODELS),
    granularity="layer|layer-per-tensor|submodule",
    bits=r"\d+(-\d+)*",
    recipe="fake|nvidia|fp8|bf16",
    chunk=r"\d+",
    task="|".join(TASKS),
    protocol="paper|lm-eval",
    split="train|validation|test",
    strategy="ddp|zero3|fsdp",
    attention="fused|eager",
    cards=r"\d+",
    repeat=r"\d+",
    devices=r"\d+",


def model_spec(wildcards):
    """The models.<name> entry, as JSON for the CLI."""
    return json.dumps(config["models"][wildcards.model], sort_keys=True)


def model_seed(wildcards):
    """The seed matters only to randomly initialised models."""
    tiny = config["models"][wildcards.model]["source"] == "tiny-random"
    return config["seed"] if tiny else 0


DATA_KEYS = ("source", "dataset", "name", "revision", "files")


def data_spec(wildcards):
    """Only the keys that change what a split contains (not limits or protocols)."""
    task = config["tasks"][wildcards.task]
    return json.dumps({k: task[k] for k in DATA_KEYS if k in task}, sort_keys=True)


def eval_split_file(wildcards):
    split = config["tasks"][wildcards.task]["eval_split"]
    return f"{RESULTS}/data/{wildcards.task}/{split}.jsonl"


def eval_settings(wildcards):
    return json.dumps(
        relevant_settings(wildcards.task, wildcards.protocol, config["evaluation"]),
        sort_keys=True,
    )


def task_limit(wildcards):
    return config["tasks"][wildcards.task]["limit"]


def task_source(wildcards):
    return config["tasks"][wildcards.task]["source"]


def baseline_records():
    return [
        f"{RESULTS}/baseline/{model}/{task}/{protocol}.json"
        for model, task, protocol in EVAL_UNITS
    ]


def calibration_file(wildcards):
    """Calibration data per STUDY.md: WikiText validation, HellaSwag/BoolQ train."""
    return f"{RESULTS}/data/{wildcards.task}/{CALIBRATION_SPLIT[wildcards.task]}.jsonl"


def calibration_settings(wildcards):
    return json.dumps(relevant_settings(wildcards.task, "paper", config["evaluation"]))


paper_settings = calibration_settings


def calibration_limit(wildcards):
    return PTQ["calibration_limit"][wildcards.task]


def ptq_remainder(wildcards):
    """ptq.remainder for this task: one value for all tasks, or a per-task mapping."""
    remainder = PTQ["remainder"]
    return (
        remainder
        if isinstance(remainder, str)
        else remainder.get(wildcards.task, "last")
    )


def sensitivity_chunks(wildcards):
    return [
        f"{RESULTS}/ptq/{wildcards.model}/{wildcards.task}/sensitivity/"
        f"{wildcards.granularity}/chunk-{i}.json"
        for i in range(PTQ["chunks"])
    ]


def ptq_records():
    return [
        f"{RESULTS}/ptq/{model}/{task}/{PTQ['granularity']}/bits-{bits}/{recipe}.json"
        for model in EVAL_MODELS
        for task in PTQ_TASKS
        for bits in BIT_LABELS
        for recipe in PTQ["recipes"]
    ]


def sensitivity_tables():
    """The gathered sensitivity tables, for the report's Fig. 1."""
    return [
        f"{RESULTS}/ptq/{model}/{task}/sensitivity/{PTQ['granularity']}.csv"
        for model in EVAL_MODELS
        for task in PTQ_TASKS
    ]


def ptq_assignments():
    """Every bit list's assignment, in config order: Fig. 1 colours the targets by them."""
    return [
        f"{RESULTS}/ptq/{model}/{task}/{PTQ['granularity']}/bits-{bits}/assignment.json"
        for model in EVAL_MODELS
        for task in PTQ_TASKS
        for bits in BIT_LABELS
    ]


FINETUNE = config["finetune"]
FINETUNE_KEYS = (
    "method", "dtype", "max_steps", "max_samples", "per_device_batch", "grad_accum",
    "max_seq_length", "learning_rate", "max_grad_norm", "throughput_warmup_steps", "lora",
    "skip_predicted_oom", "on_unsupported", "checkpoint_steps", "gaudi_mode",
)  # fmt: skip
CARD_RESOURCE = SYSTEM.get("card_resource", "none")


def finetune_records():
    if not FINETUNE["enabled"]:
        return []
    return [
        f"{RESULTS}/finetune/{p.model}/{p.strategy}/{p.attention}/cards-{p.cards}/"
        f"repeat-{p.repeat}.json"
        for p in sweep_points(config)
    ]


def finetune_point(wildcards):
    """The point as the worker reads it: only the finetune keys a point depends on."""
    point = {key: FINETUNE[key] for key in FINETUNE_KEYS}
    point.update(
        strategy=wildcards.strategy,
        attention=wildcards.attention,
        cards=int(wildcards.cards),
        repeat=int(wildcards.repeat),
        seed=config["seed"],
        data={"source": "local", "file": f"{RESULTS}/data/instructions/train.jsonl"},
    )
    return json.dumps(point, sort_keys=True)


def _cards(wildcards):
    """A point's cards: a fine-tuning point's `cards`, a diffusion point's `devices`."""
    return int(wildcards.get("cards") or wildcards.devices)


def point_cards(kind):
    """A resource counting this point's cards where the system's card resource is `kind`."""
    return lambda wildcards: _cards(wildcards) if CARD_RESOURCE == kind else 0


def point_nodes(wildcards):
    return nodes_for(_cards(wildcards), SYSTEM)


def point_threads(wildcards):
    """On the cpu system a card is a process, so a point takes one core per card."""
    return _cards(wildcards) if SYSTEM["device"] == "cpu" else 1


device_cards, device_nodes, diffusion_threads = point_cards, point_nodes, point_threads


DIFFUSION = config["diffusion"]
DIFFUSION_KEYS = (
    "total_iterations", "warmup_iterations", "batch_per_device", "learning_rate", "dtype",
    "model", "schedule", "quality",
)  # fmt: skip


def diffusion_records():
    return [
        f"{RESULTS}/diffusion/devices-{p.devices}/repeat-{p.repeat}.json"
        for p in diffusion_points(config)
    ]


def diffusion_samples():
    return [path.replace(".json", ".samples.npz") for path in diffusion_records()]


def diffusion_point(wildcards):
    """The point as the worker reads it: only the diffusion keys a point depends on."""
    point = {key: DIFFUSION[key] for key in DIFFUSION_KEYS}
    point.update(
        devices=int(wildcards.devices),
        repeat=int(wildcards.repeat),
        seed=config["seed"],
    )
    return json.dumps(point, sort_keys=True)


def compare_inputs():
    """Every JSON of the runs to compare (`compare` tells records), and this study's report
    where this study is one of the runs, so that it finishes first."""
    runs = [Path(run) for run in config["compare"]["runs"]]
    files = [
        str(p) for run in runs for p in run.rglob("*.json") if "logs" not in p.parts
    ]
    this = Path(RESULTS).resolve() in [run.resolve() for run in runs]
    return sorted(files) + ([f"{RESULTS}/report/index.html"] if this else [])
