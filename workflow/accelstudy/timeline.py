"""When a job's phases began, so the report can set the time before its measured work (process
start, imports, loading the model and data, warm-up) beside the measured work itself."""

import datetime as dt
import os
import time
from collections.abc import Callable
from pathlib import Path

import psutil

MARKS: dict[str, float] = {}  # epoch seconds: "ready" (model and data), "measured" (first timed)
LISTENERS: dict[str, Callable[[str], None]] = {}  # told of each phase as it begins (energy meter)


def mark(phase: str) -> None:
    """The first time this process reaches `phase` (a later repeat keeps the first)."""
    if phase not in MARKS:
        MARKS[phase] = time.time()
        for listener in list(LISTENERS.values()):
            listener(phase)


def process_start() -> float:
    """When this process started (epoch seconds): on Linux its start tick against /proc/uptime,
    both since boot (psutil's create_time adds a boot time in whole seconds: up to 1 s off)."""
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - started)
    except (OSError, IndexError, ValueError):
        return psutil.Process().create_time()


def since_start() -> dict[str, float | str]:
    """This process's start (what Snakemake started) and each phase, in seconds after it."""
    start = process_start()
    seconds = {f"{phase}_s": round(at - start, 3) for phase, at in MARKS.items()}
    started = dt.datetime.fromtimestamp(start, dt.UTC).isoformat(timespec="seconds")
    return {"started_at": started, **seconds, "end_s": round(time.time() - start, 3)}
