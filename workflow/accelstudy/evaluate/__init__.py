"""One entry point: perplexity or multiple-choice accuracy under a protocol, throughput, memory."""

import importlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Self

import pandas as pd
from transformers import PreTrainedModel
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy import flops, timeline
from accelstudy.device import Device
from accelstudy.tasks import PROTOCOLS, TASKS, Kind
from accelstudy.uncertainty import stderrs

# a task's kind -> its scorer's module (imported when used: perplexity imports lm_eval's tasks)
SCORERS: dict[Kind, str] = {"perplexity": "perplexity", "multiple-choice": "multiple_choice"}


@dataclass
class Meter:
    """Count tokens through the model; read time and peak memory at the end."""

    device: Device
    tokens: int = 0
    squared_lengths: int = 0  # the sum of each row's length squared: attention's work
    head_tokens: int = 0  # positions the LM head ran on (every token but in choice scoring)
    _start: float = field(default=0.0, repr=False)
    wall_time_s: float = 0.0

    def __enter__(self) -> Self:
        self.device.synchronize()
        self.device.reset_peak_memory()
        self._start = time.perf_counter()
        timeline.mark("ready")  # an evaluation has no warm-up: measured from here
        timeline.mark("measured")
        return self

    def __exit__(self, *exc) -> None:
        self.device.synchronize()
        self.wall_time_s = time.perf_counter() - self._start
        timeline.mark("done")

    def ran(self, lengths: Iterable[int], head_tokens: int | None = None) -> None:
        """Rows of these lengths went through the model; the head saw every token unless told."""
        lengths = list(lengths)
        self.tokens += sum(lengths)
        self.squared_lengths += sum(n * n for n in lengths)
        self.head_tokens += sum(lengths) if head_tokens is None else head_tokens

    def metrics(self, config: dict[str, Any]) -> dict[str, float | int]:
        """Time, tokens, rate, peak memory; the model's (`config`) FLOPs per token (`flops`)."""
        out = {"wall_time_s": round(self.wall_time_s, 4), "tokens": self.tokens}
        if self.tokens:
            head = 2 * config["hidden_size"] * config["vocab_size"]
            work = (flops.linear_forward(config) - head) * self.tokens + head * self.head_tokens
            work += flops.attention_forward(config, self.squared_lengths)
            out["flops_per_token"] = work / self.tokens
        out["tokens_per_s"] = round(self.tokens / self.wall_time_s, 2) if self.wall_time_s else 0.0
        return {**out, "peak_memory_bytes": self.device.peak_memory_bytes()}


@dataclass(frozen=True)
class Scoring:
    """What a task's scorer gets: the task under a protocol, its rows (the first `limit` scored)."""

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
    """Metrics (with tokens/s, wall time, peak memory, standard errors) and per-item details."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; expected one of {PROTOCOLS}")
    spec = TASKS[task]
    scorer = importlib.import_module(f"accelstudy.evaluate.{SCORERS[spec.kind]}")
    with Meter(device) as meter:
        scoring = Scoring(model, tokenizer, task, protocol, rows, settings, meter, limit)
        metrics, details = scorer.score(scoring)
    metrics.update(meter.metrics(model.config.to_dict()))
    metrics |= stderrs(pd.DataFrame(details), metrics)  # each metric's, from its items
    metrics["primary_metric"] = spec.metric.name
    return metrics, details
