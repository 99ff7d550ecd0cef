"""Shared set-up for benchmarks: the embedded model (or a tiny one) and timing helpers."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke run)")
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    return parser.parse_args()


def load_model(tiny: bool):
    from accelstudy.models import load_from_source

    if tiny:
        return load_from_source({"source": "tiny-random", "tiny": {}})
    return load_from_source({"source": "gguf", "gguf_file": "embedded"})


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """Median wall time of `repeats` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)
