"""Shared set-up for benchmarks: the embedded model (or a tiny one), the GEMM rate, timing.

Every benchmark takes `--tiny` (a smoke run of seconds) and prints its headline ratios on lines
that start with "ratio: " (tests/test_bench.py runs each so)."""

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
    parser.add_argument("--items", type=int, help="items per task (default 40; --tiny: 8)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    args.items = args.items or (8 if args.tiny else 40)
    return args


def load_model(tiny: bool):
    from accelstudy.models import load_from_source

    if tiny:
        return load_from_source({"source": "tiny-random", "tiny": {}})
    return load_from_source({"source": "gguf", "gguf_file": "embedded"})


def gemm_rates(threads: int, tiny: bool) -> dict[str, float]:
    """FLOP/s per dtype on `threads`: the study's probe, measured now (and cached); --tiny: a
    quick one, not cached (a smoke run's rate, maybe under load, must not be the records' peak)."""
    from accelstudy.peak import gemm_rate, probe

    if not tiny:
        return probe(threads)["flops_per_s"]
    set_threads(threads)
    return {name: gemm_rate(name, budget_s=0.01) for name in ("float32", "bfloat16")}


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
