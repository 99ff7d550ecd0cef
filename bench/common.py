"""Shared set-up for benchmarks: the embedded model (or a tiny one), the GEMM rate, timing.

Every benchmark takes `--tiny` (a smoke run of seconds) and prints its headline ratios on lines
that start with "ratio: " (tests/test_bench.py runs each so). Every figure a benchmark holds to
a bound goes through `judge`: it prints one "bound:" line per figure and the benchmark exits 1
when any falls outside; `--bound NAME=LOW:HIGH` replaces a bound (an impossible one shows that
the benchmark can fail)."""

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

Bound = tuple[float | None, float | None]  # low, high (None: open on that side)


def prepare_stage(*argv: str) -> None:
    """A preparation stage (`accelstudy prepare-model ...`, the study's own command) run in this
    process: its output as the rule makes it, without a second process importing torch and
    transformers for work that no bench times (each timed run stays a process of its own)."""
    from accelstudy.cli import main

    if code := main(list(argv)):
        raise SystemExit(f"accelstudy {' '.join(argv[:1])} exited {code}")


def parse_bound(text: str) -> tuple[str, Bound]:
    """`NAME=LOW:HIGH`, either side may be empty: ("NAME", (LOW, HIGH))."""
    name, sep, span = text.partition("=")
    low, colon, high = span.partition(":")
    try:
        if not (sep and colon and name):
            raise ValueError
        return name, (float(low) if low else None, float(high) if high else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--bound {text!r}: write NAME=LOW:HIGH") from None


def judge(figures: dict[str, float], bounds: dict[str, Bound], overrides: list) -> int:
    """Print each bounded figure beside its bound; 1 if any is outside (or a bound names no
    figure), else 0. `overrides`: the `--bound` pairs, which replace the shipped bounds."""
    bounds = bounds | dict(overrides)
    failed = 0
    for name, (low, high) in bounds.items():
        if name not in figures:
            print(f"bound: {name}: no such figure (figures: {', '.join(figures)})")
            failed = 1
            continue
        value = figures[name]
        held = (low is None or value >= low) and (high is None or value <= high)
        span = f"[{'' if low is None else f'{low:g}'}, {'' if high is None else f'{high:g}'}]"
        print(f"bound: {name} {value:.4g} {'within' if held else 'OUTSIDE'} {span}")
        failed |= not held
    return int(failed)


def parse_args(description: str, **extra: Any) -> argparse.Namespace:
    """The flags every benchmark takes; `extra`: its own, `--NAME` with that default (and type)."""
    parser = argparse.ArgumentParser(description=description)
    for name, default in extra.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    parser.add_argument(
        "--bound",
        action="append",
        type=parse_bound,
        default=[],
        metavar="NAME=LOW:HIGH",
        help="replace a figure's bound (either side may be empty)",
    )
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke run)")
    parser.add_argument("--items", type=int, help="items per task (default 40; --tiny: 4)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    args.items = args.items or (4 if args.tiny else 40)
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


def best_of(fn: Callable[[], object], repeats: int = 3, warm_up: bool = True) -> float:
    """Median wall time of `repeats` calls, after one warm-up call (unless `warm_up` is False:
    the caller has just called it)."""
    if warm_up:
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)


def launch_point(
    spec: Any,
    model_dir: Path,
    out: Path,
    system_name: str,
    threads: int,
    module: str | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    """One fine-tuning point (a FinetunePoint) on `threads` cores, its ranks launched by the
    pipeline's command with the environment a point's job gives them (launch.PointJob's), each
    rank its own process (a job runs a one-card point's in its own, which would count this
    bench's bytes as the rank's): their result, which rank 0 writes to `out`. `module`: the
    ranks' program in place of the fine-tuning worker (one that runs it, instrumented), `env`
    added to theirs."""
    from accelstudy.finetune.job import WORKER
    from accelstudy.launch import PointJob, command

    job = PointJob.from_flags(study="bench", system=system_name, out=out, threads=threads)
    args = ["--point", spec.to_json(), "--model-dir", str(model_dir), "--out", str(out)]
    env = {**os.environ, **job.rank_environ(spec.cards), **(env or {})}
    line = command(job.system, spec.cards, module or WORKER, args, spec.strategy, threads)
    done = subprocess.run(line, env=env, capture_output=True, text=True)
    if done.returncode or not out.is_file():
        raise SystemExit(f"{spec.strategy}/{spec.attention} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())
