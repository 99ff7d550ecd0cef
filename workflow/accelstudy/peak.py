"""The machine's limit: a card's dense peak FLOP/s from its system file (the vendor's datasheet,
with its address), from resources/gpu_peaks.csv by the name torch reports for the card (a system
whose cards are not known until a job runs: `peak_flops: by-device-name`), or a CPU's measured by
a GEMM probe; and the dtype `auto` computes in.
A CPU's probe runs when nothing else does (the Makefile's set-up, `accelstudy probe`), cached by
CPU model, flags, threads, usable CPUs, torch version and the variables that steer torch's
kernel choice; a job that finds no entry probes itself, and says so (it may share the cores)."""

import csv
import functools
import hashlib
import json
import logging
import math
import os
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from accelstudy.files import write_json
from accelstudy.kinds import KINDS
from accelstudy.paths import RESOURCES
from accelstudy.systems import System

log = logging.getLogger("accelstudy")
DISPATCH = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
# the flags a record names: the vector and matrix units that decide a GEMM's speed
CPU_FLAGS = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"}


@functools.cache
def cpu_model_and_flags() -> tuple[str, list[str]]:
    """/proc/cpuinfo's model name and flags (the first processor's; read once per process)."""
    info = Path("/proc/cpuinfo")
    first = (info.read_text() if info.is_file() else "").split("\n\n")[0]
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    model = {k.strip(): v.strip() for k, v in fields.items()}
    return model.get("model name", ""), sorted(model.get("flags", "").split())


def cache_file() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "accelstudy" / "cpu-peak.json"


def cached_probes() -> dict[str, Any]:
    """The cache's entries; an unreadable cache is an empty one (the next probe rewrites it)."""
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}


def probe_key(threads: int) -> str:
    """The cache key; torch's version from its metadata, so that reading the cache (the
    forecast, at parse time) does not import torch."""
    model, flags = cpu_model_and_flags()
    dispatch = {name: os.environ.get(name, "") for name in DISPATCH}
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch_version = metadata.version("torch")
    what = json.dumps([model, flags, threads, usable, torch_version, dispatch], sort_keys=True)
    return hashlib.sha256(what.encode()).hexdigest()[:16]


def gemm_rate(dtype_name: str, budget_s: float = 0.15) -> float:
    """The best FLOP/s of one square GEMM call in `dtype_name`, growing the size while a call
    stays short (emulated bfloat16 runs at 1/100 of float32: a large one would take seconds)."""
    import torch

    dtype, best = getattr(torch, dtype_name), 0.0
    for size in (256, 512, 1024):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        torch.mm(a, b)  # the first call picks and packs the kernel
        calls, start, fastest = 0, time.perf_counter(), math.inf
        while time.perf_counter() - start < budget_s or calls < 2:
            began = time.perf_counter()
            torch.mm(a, b)
            fastest, calls = min(fastest, time.perf_counter() - began), calls + 1
        best = max(best, 2 * size**3 / fastest)
        if fastest > 0.05:
            break
    return best


def probe(threads: int, where: str = "at set-up") -> dict[str, Any]:
    """Measure this CPU's GEMM rate per dtype on `threads` threads; cache it, and where."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rates = {name: gemm_rate(name) for name in ("float32", "bfloat16")}
    finally:
        torch.set_num_threads(before)
    entry = {"threads": threads, "flops_per_s": rates, "torch": torch.__version__, "where": where}
    entry["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_json(cache_file(), {**cached_probes(), probe_key(threads): entry})
    return entry


def cpu_rates(threads: int, *, probe_if_missing: bool = True) -> dict[str, Any] | None:
    """The cached probe for this CPU at `threads`, else a fresh one (labelled in-job)."""
    if (entry := cached_probes().get(probe_key(threads))) is not None or not probe_if_missing:
        return entry
    log.info("no GEMM probe cached for %d thread(s): probing inside this job", threads)
    return probe(threads, "inside a job")


GPU_PEAKS = RESOURCES / "gpu_peaks.csv"
BY_NAME = "by-device-name"


@functools.cache
def gpu_peaks() -> dict[str, dict[str, str]]:
    """resources/gpu_peaks.csv by the exact name torch reports (`torch.cuda.get_device_name()`):
    the name carries the form factor ("NVIDIA H100 PCIe" is not "NVIDIA H100 80GB HBM3", 756 vs
    989 TFLOP/s dense BF16), so a row matches one product or none, never a family."""
    with GPU_PEAKS.open(newline="") as table:
        return {row["device_name"]: row for row in csv.DictReader(table)}


def by_device_name(name: str | None, dtype: str) -> dict[str, Any]:
    """A card's dense peak in `dtype` from the table's row for `name`: the figure and its
    datasheet, or None and why (no name before a job runs, a card or dtype the table lacks)."""
    row = gpu_peaks().get(name or "")
    if name is None:
        return {"stated": {"note": "the card's name, known only inside a job"}}
    if row is None:
        why = f"'{name}' is not a row of resources/gpu_peaks.csv (add it with its datasheet)"
        return {"stated": {"note": why}, "device_name": name}
    figure = row.get(dtype) or None
    note = row["note"] if figure else f"no {dtype} figure in its row ({row['note']})"
    stated = {dtype: figure, "doc": row["doc"], "note": note}
    return {"stated": stated, "device_name": name, "table": "resources/gpu_peaks.csv"}


def peak(
    system: System,
    device_kind: str,
    dtype: str,
    ranks: int,
    threads: int,
    device_name: str | None = None,
    probe_if_missing: bool = True,
) -> dict[str, Any]:
    """The limit of what a job held: `ranks` cards (or CPU processes of `threads` threads);
    `device_name` (what torch reports for the card) picks the row of a `by-device-name` system.
    `probe_if_missing` False: a CPU without a cached probe is unknown (a plan runs no probe)."""
    stated = system.peak_flops if isinstance(system.peak_flops, dict) else {}
    looked_up: dict[str, Any] = {}
    if system.peak_flops == BY_NAME:
        looked_up = by_device_name(device_name, dtype)
        stated = looked_up.pop("stated")
    if KINDS[device_kind].host and system.peak_flops in (None, "measured"):
        entry = cpu_rates(threads, probe_if_missing=probe_if_missing) or {}
        per_card = entry.get("flops_per_s", {}).get(dtype)
        source = f"measured: {threads}-thread {dtype} GEMM probe {entry.get('where', 'at set-up')}"
    elif stated.get(dtype) is not None:
        per_card, source = float(stated[dtype]), f"datasheet: {stated['doc']}"
        source += f" (resources/gpu_peaks.csv, row '{device_name}')" if looked_up else ""
    else:
        per_card, why = None, stated.get("note") or "no figure for it in the system file"
        source = f"unknown: {system.label} {dtype}: {why}"
    if per_card is None:
        return {"status": "unknown", "source": source, "ranks": ranks, **looked_up}
    block = {"status": "ok", "flops_per_s": per_card * ranks, "per_card_flops_per_s": per_card}
    return block | {"ranks": ranks, "source": source, **looked_up}


def utilization(peak_block: dict[str, Any], achieved: float) -> dict[str, Any]:
    """Achieved FLOP/s over the measured window beside the limit: the fraction of peak (MFU)."""
    mfu = achieved / peak_block["flops_per_s"] if peak_block.get("flops_per_s") else None
    return {**peak_block, "achieved_flops_per_s": achieved, "mfu": mfu}


def resolve_dtype(asked: str, system: System, device_kind: str, threads: int) -> tuple[str, str]:
    """The dtype a job computes in, and why: `auto` takes bfloat16 on a card that offers it and
    on a CPU whose probe runs bfloat16 GEMMs at least as fast as float32, else float32."""
    offered = set(system.dtypes)
    if asked == "auto" and not KINDS[device_kind].host:
        chosen = "bfloat16" if "bfloat16" in offered else "float32"
        return chosen, f"auto: {system.label} offers {sorted(offered)}"
    if asked not in ("auto", "bfloat16") or not KINDS[device_kind].host:
        return asked, "asked"
    rates = (cpu_rates(threads) or {}).get("flops_per_s", {})
    bf16, fp32 = rates.get("bfloat16", 0.0), rates.get("float32", 0.0)
    shown = f"bfloat16 GEMM {bf16 / 1e9:.1f} vs float32 {fp32 / 1e9:.1f} GFLOP/s on this CPU"
    if asked == "bfloat16":
        if bf16 < fp32:
            log.warning("bfloat16 as asked, though this CPU emulates it: %s", shown)
        return asked, "asked"
    take_bf16 = (bf16 >= fp32 and "bfloat16" in offered) or "float32" not in offered
    return ("bfloat16" if take_bf16 else "float32"), f"auto: {shown}"
