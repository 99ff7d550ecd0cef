"""One entry point: perplexity or multiple-choice accuracy under a protocol, throughput, memory."""

from typing import Any

from torch import nn
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy.device import Device
from accelstudy.evaluate.meters import Meter
from accelstudy.evaluate.multiple_choice import evaluate_multiple_choice
from accelstudy.tasks import TASKS

PROTOCOLS = ("paper", "lm-eval")


def evaluate_task(
    model: nn.Module,
    tokenizer: Tokenizer,
    task: str,
    protocol: str,
    rows: list[dict],
    settings: dict[str, Any],
    device: Device,
    limit: int | None = None,
) -> tuple[dict[str, Any], list[dict]]:
    """Metrics (with tokens/s, wall time, peak memory) and per-item details."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; expected one of {PROTOCOLS}")
    spec, details = TASKS[task], []
    if spec.kind == "perplexity":  # here, since it imports lm_eval's tasks (and datasets)
        from accelstudy.evaluate import perplexity
    with Meter(device) as meter:
        if spec.kind == "perplexity" and protocol == "paper":
            blocks = perplexity.paper_blocks(tokenizer, rows, settings["block_size"], limit)
            metrics = perplexity.paper(model, blocks, settings["batch_size"], meter)
        elif spec.kind == "perplexity":
            docs = perplexity.documents(rows)[: limit or None]
            max_length = settings["lm_eval_max_length"]
            metrics = perplexity.lm_eval(model, tokenizer, docs, meter, max_length)
        else:
            key = f"{task}_max_length" if protocol == "paper" else "lm_eval_max_length"
            args = (model, tokenizer, task, protocol, rows[: limit or None], meter, settings[key])
            metrics, details = evaluate_multiple_choice(*args)
    metrics.update(meter.metrics(model.config.to_dict()))
    metrics["primary_metric"] = spec.metric.name
    return metrics, details
