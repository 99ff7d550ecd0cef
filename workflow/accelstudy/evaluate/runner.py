"""One entry point: evaluate a model on a task under a named protocol."""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from accelstudy.device import Device
from accelstudy.evaluate.meters import Meter
from accelstudy.evaluate.multiple_choice import evaluate_multiple_choice
from accelstudy.evaluate.perplexity import perplexity_lm_eval, perplexity_paper

PROTOCOLS = ("paper", "lm-eval")
PRIMARY_METRIC = {"wikitext": "perplexity", "hellaswag": "accuracy", "boolq": "accuracy"}


def evaluate_task(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: str,
                  protocol: str, rows: list[dict], settings: dict[str, Any], device: Device,
                  limit: int | None = None) -> tuple[dict[str, Any], list[dict]]:  # fmt: skip
    """Metrics (with tokens/s, wall time, peak memory) and per-item details."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; expected one of {PROTOCOLS}")
    details: list[dict] = []
    with Meter(device) as meter:
        if task == "wikitext" and protocol == "paper":
            size, batch = settings["block_size"], settings["batch_size"]
            metrics = perplexity_paper(model, tokenizer, rows, meter, size, batch, limit)
        elif task == "wikitext":
            max_length = settings["lm_eval_max_length"]
            metrics = perplexity_lm_eval(model, tokenizer, rows, meter, max_length, limit)
        else:
            key = f"{task}_max_length" if protocol == "paper" else "lm_eval_max_length"
            items = rows[:limit] if limit else rows
            metrics, details = evaluate_multiple_choice(
                model, tokenizer, task, protocol, items, meter, settings[key]
            )
    metrics.update(meter.metrics())
    metrics["primary_metric"] = PRIMARY_METRIC[task]
    return metrics, details


def relevant_settings(task: str, protocol: str, evaluation: dict[str, Any]) -> dict[str, Any]:
    """Only the evaluation keys that change this (task, protocol)'s number: rules pass these as
    params, so editing one knob re-runs only the evaluations it affects."""
    if task == "wikitext" and protocol == "paper":
        keys = ["block_size", "batch_size"]
    elif protocol == "lm-eval":
        keys = ["lm_eval_max_length"]
    else:
        keys = [f"{task}_max_length"]
    return {key: evaluation[key] for key in [*keys, "dtype"]}
