# Config validation and input functions shared by all rules.
import json
import os

from accelstudy.config import validate_config
from accelstudy.evaluate.runner import relevant_settings

validate_config(config)

RESULTS = f"{config['results_dir']}/{config['study']}"
MODELS = sorted(config["models"])
TASKS = sorted(config["tasks"])
EVAL_UNITS = [
    (model, task, protocol)
    for model in MODELS
    for task in TASKS
    for protocol in config["tasks"][task]["protocols"]
]


wildcard_constraints:
    model="|".join(MODELS),
    task="|".join(TASKS),
    protocol="paper|lm-eval",
    split="train|validation|test",


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
