"""The fine-tuning sweep: config -> points (model, strategy, attention, cards, repeat), each one
Snakemake job, and its checks, which run before any job, each error one line naming the key
and the fix. Cards beyond one node take several; on the `cpu` system a card is a process."""

from __future__ import annotations

import importlib.util
import itertools
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple


class SweepError(ValueError):
    """A sweep the system cannot run, phrased as one line naming the key and the fix."""


class Point(NamedTuple):
    model: str
    strategy: str
    attention: str
    cards: int
    repeat: int


def cards_per_node(system: Mapping[str, Any]) -> int:
    """`cores` (the cpu system: a card is a process) means this machine's core count."""
    value = system["cards_per_node"]
    return (os.cpu_count() or 1) if value == "cores" else int(value)


def nodes_for(cards: int, system: Mapping[str, Any]) -> int:
    return math.ceil(cards / cards_per_node(system))


def points(config: Mapping[str, Any]) -> Iterator[Point]:
    sweep = config["finetune"]
    models = sweep.get("models") or sorted(config["models"])
    axes = sweep["strategies"], sweep["attention"], sweep["cards"], range(sweep["repeats"])
    return itertools.starmap(Point, itertools.product(models, *axes))


def check_cards(key: str, counts: list[int], system: Mapping[str, Any]) -> None:
    """Every count of cards (processes on the cpu system) within what the system offers."""
    per_node, nodes = cards_per_node(system), int(system.get("nodes", 1))
    for cards in counts:
        if cards > per_node * nodes:
            unit = "cores" if system["cards_per_node"] == "cores" else "cards"
            raise SweepError(
                f"config key '{key}': {cards} cards, but system '{system['name']}' offers "
                f"{per_node * nodes} ({nodes} node(s) x {per_node} {unit}); ask for at most "
                f"{per_node * nodes}"
            )


def check_dtype(key: str, dtype: str, system: Mapping[str, Any]) -> None:
    if dtype not in system.get("dtypes", [dtype]):
        raise SweepError(
            f"config key '{key}': {dtype} is not offered by "
            f"{system.get('accelerator', system['name'])} (system '{system['name']}': "
            f"{system['dtypes']}); use one of those"
        )


def check_sweep(config: Mapping[str, Any], system: Mapping[str, Any]) -> None:
    """Models configured, cards the system has, dtype it offers, DeepSpeed for ZeRO-3."""
    sweep = config["finetune"]
    if not sweep["enabled"]:
        return
    for model in sweep.get("models") or []:
        if model not in config["models"]:
            raise SweepError(
                f"config key 'finetune.models': model '{model}' is not configured under "
                f"'models'; configured: {sorted(config['models'])}"
            )
    check_cards("finetune.cards", sweep["cards"], system)
    check_dtype("finetune.dtype", sweep["dtype"], system)
    zero3 = "zero3" in sweep["strategies"] and sweep["on_unsupported"] == "error"
    if zero3 and importlib.util.find_spec("deepspeed") is None:
        raise SweepError(
            "config key 'finetune.strategies': zero3 needs DeepSpeed, which is not installed "
            "here; pip install the project's pinned deepspeed, drop zero3, or set "
            "finetune.on_unsupported: record"
        )
