"""One entry point: perplexity or multiple-choice accuracy under a protocol, throughput, memory."""

import importlib
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Scoring:
    """What a task's scorer gets: the model and tokenizer, the task under a protocol, its rows
    (of which it scores the first `limit`), the evaluation settings and the meter."""

    model: PreTrainedModel
    tokenizer: Tokenizer
    task: str
    protocol: str
    rows: list[dict]
    settings: dict[str, Any]
    meter: Meter
    limit: int | None


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
        scoring = Scoring(model, tokenizer, task, protocol, rows, settings, meter, limit)
        metrics, details = scorer.score(scoring)
    metrics.update(meter.metrics(model.config.to_dict()))
    metrics["primary_metric"] = spec.metric.name
    return metrics, details
