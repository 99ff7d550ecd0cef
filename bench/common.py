"""Shared set-up for benchmarks: the embedded model (or a tiny one), the GEMM rate, timing.

Every benchmark takes `--tiny` (a smoke run of seconds) and prints its headline ratios on lines
that start with "ratio: " (tests/test_bench.py runs each so)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def launch_point(spec: Any, model_dir: Path, out: Path, system_name: str, threads: int) -> dict:
    """One fine-tuning point (a FinetunePoint) through the launcher the pipeline uses, on
    `threads` cores: its ranks' result (rank 0 writes it to `out`)."""
    from accelstudy import launch
    from accelstudy.finetune.job import WORKER
    from accelstudy.systems import load_system

    system = load_system(system_name)
    args = ["--point", spec.to_json(), "--model-dir", str(model_dir), "--out", str(out)]
    # OMP threads per rank: the ranks share this run's threads, as the launcher splits them
    env = {"OMP_NUM_THREADS": str(max(1, threads // system.layout(spec.cards)[1]))}
    command = launch.command(system, spec.cards, WORKER, args, spec.strategy)
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
    if done.returncode or not out.is_file():
        raise SystemExit(f"{spec.strategy}/{spec.attention} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())
