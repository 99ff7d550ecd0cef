"""One entry point: perplexity or multiple-choice accuracy under a protocol, throughput, memory."""

import importlib
from typing import Any

from transformers import PreTrainedModel
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy.device import Device
from accelstudy.evaluate.meters import Meter
from accelstudy.tasks import TASKS, Kind

PROTOCOLS = ("paper", "lm-eval")
# a task's kind (accelstudy.tasks) -> the module that scores it, imported only when used
# (perplexity imports lm_eval's tasks, and datasets): its score() handles both protocols
SCORERS: dict[Kind, str] = {"perplexity": "perplexity", "multiple-choice": "multiple_choice"}


def evaluate_task(
    model: PreTrainedModel,
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
    spec = TASKS[task]
    scorer = importlib.import_module(f"accelstudy.evaluate.{SCORERS[spec.kind]}")
    with Meter(device) as meter:
        metrics, details = scorer.score(
            model, tokenizer, task, protocol, rows, settings, meter, limit
        )
    metrics.update(meter.metrics(model.config.to_dict()))
    metrics["primary_metric"] = spec.metric.name
    return metrics, details
