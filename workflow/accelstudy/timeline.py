"""When a job's phases began, so the report can set the time before its measured work (process
start, imports, loading the model and data, warm-up) beside the measured work itself; and the
seconds each start-up phase took (imports, device, model, data), so slow starts have a name."""

import datetime as dt
import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

MARKS: dict[str, float] = {}  # epoch seconds: "ready" (model and data), "measured" (first timed)
LISTENERS: dict[str, Callable[[str], None]] = {}  # told of each phase as it begins (energy meter)
STARTUP = ("imports", "device", "model", "data")  # the start-up phases, in the order they run
SPENT: dict[str, float] = {}  # seconds in each start-up phase (exclusive: a nested one pauses it)
MODEL_BYTES: dict[str, int] = {}  # "read": the model files' bytes the model phase read
RANK_PHASES: dict[str, float | int] = {}  # a launched point's: its rank 0's phases()
_RUNNING: list[list] = []  # [phase, since] of the phases entered and not left, innermost last
_BEGUN: list[float] = []  # when each job of this process began (one process may run several)


def starting() -> None:
    """A program starts: no garbage collection during its imports. torch and transformers make
    ~650k objects that live to the end; collecting among them cost a quarter of the imports."""
    gc.disable()


def imported() -> None:
    """A program's imports are done (its entry point calls this): from the process's start."""
    SPENT["imports"] = time.time() - process_start()
    settled()


def settled() -> None:
    """What exists now lives to the end: out of every later collection's sight, finalization's
    included (which otherwise spends about a second at exit walking the imported modules)."""
    gc.freeze()
    gc.enable()


def begin_job() -> None:
    """A job begins: its phases are its own; only a process's first job had its imports."""
    imports = SPENT.pop("imports", None)
    for kept in (MARKS, SPENT, MODEL_BYTES, RANK_PHASES):
        kept.clear()
    if imports is not None and not _BEGUN:
        SPENT["imports"] = imports
    _BEGUN.append(time.time())


def job_start() -> float:
    """When this job began (epoch seconds): its process's start for the process's first job
    (whose start-up the process's is), else when it began (after the job before it)."""
    return _BEGUN[-1] if len(_BEGUN) > 1 else process_start()


def _charge(now: float) -> None:
    name, since = _RUNNING[-1]
    SPENT[name] = SPENT.get(name, 0.0) + now - since
    _RUNNING[-1][1] = now


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Charge the time inside to start-up phase `name`; an enclosing phase pauses meanwhile
    (a model's lazily imported code counts as imports, not as reading its weights)."""
    now = time.perf_counter()
    if _RUNNING:
        _charge(now)
    _RUNNING.append([name, now])
    try:
        yield
    finally:
        _charge(time.perf_counter())
        _RUNNING.pop()
        if _RUNNING:
            _RUNNING[-1][1] = time.perf_counter()


def read_model_files(files: list[Path]) -> None:
    """Count files the model phase reads (its rate, beside a plain read's, in bench/startup.py)."""
    MODEL_BYTES["read"] = MODEL_BYTES.get("read", 0) + sum(f.stat().st_size for f in files)


def phases() -> dict[str, float | int]:
    """Each start-up phase's seconds (those that ran) and the model bytes read."""
    spent: dict[str, float | int] = {f"{p}_s": round(SPENT[p], 3) for p in STARTUP if p in SPENT}
    return spent | ({"model_bytes": MODEL_BYTES["read"]} if "read" in MODEL_BYTES else {})


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


def since_start() -> dict[str, Any]:
    """This job's start (its process's, what Snakemake started, for the first job a process
    runs) and each phase, in seconds after it."""
    start = job_start()
    seconds = {f"{phase}_s": round(at - start, 3) for phase, at in MARKS.items()}
    started = dt.datetime.fromtimestamp(start, dt.UTC).isoformat(timespec="seconds")
    ended = {"end_s": round(time.time() - start, 3), "phases": phases()}
    ended |= {"rank_phases": dict(RANK_PHASES)} if RANK_PHASES else {}
    return {"started_at": started, **seconds, **ended}
