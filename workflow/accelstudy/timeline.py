"""When a job's phases began, so the report can set the time before its measured work (process
start, imports, loading the model and data, warm-up) beside the measured work itself; and the
seconds each start-up phase took (imports, device, model, data), so slow starts have a name.
A job owns its Timeline (Job.clock); code deep inside it reaches the one running now through
this module's functions."""

import datetime as dt
import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil


class Phase(StrEnum):
    """The start-up phases, in the order they run (a record's `phases`: `<phase>_s`)."""

    IMPORTS = "imports"
    PLAN = "plan"  # a launching job's own: its memory plan and checks before it launches
    LAUNCHER = "launcher"  # from its launch to rank 0's process start (torchrun, mpirun, srun)
    DEVICE = "device"
    MODEL = "model"
    DATA = "data"


class Mark(StrEnum):
    """The moments of a job's work (a record's `timeline`: `<mark>_s` after its start)."""

    READY = "ready"  # model and data in place
    MEASURED = "measured"  # the measured window opens (after any warm-up)
    DONE = "done"  # it closes


STARTUP = tuple(Phase)


@dataclass
class Timeline:
    """One job's: when it began, the seconds in each start-up phase (exclusive: a nested one
    pauses it), when it first reached each mark, the model bytes read, a launched point's rank
    0's phases, and who is told of each mark (the energy meter)."""

    begun: float  # epoch seconds
    spent: dict[Phase, float] = field(default_factory=dict)
    marks: dict[Mark, float] = field(default_factory=dict)
    model_bytes: int | None = None
    rank_phases: dict[str, float | int] = field(default_factory=dict)
    listeners: dict[str, Callable[[str], None]] = field(default_factory=dict)
    running: list[list] = field(default_factory=list)  # [phase, since], innermost last

    def _charge(self, now: float) -> None:
        name, since = self.running[-1]
        self.spent[name] = self.spent.get(name, 0.0) + now - since
        self.running[-1][1] = now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the time inside to start-up phase `name`; an enclosing phase pauses meanwhile
        (a model's lazily imported code counts as imports, not as reading its weights)."""
        now = time.perf_counter()
        if self.running:
            self._charge(now)
        self.running.append([Phase(name), now])
        try:
            yield
        finally:
            self._charge(time.perf_counter())
            self.running.pop()
            if self.running:
                self.running[-1][1] = time.perf_counter()

    def mark(self, name: str) -> None:
        """The first time this job reaches `name` (a later repeat keeps the first)."""
        if (mark := Mark(name)) not in self.marks:
            self.marks[mark] = time.time()
            for listener in list(self.listeners.values()):
                listener(mark)

    def read_model_files(self, files: list[Path]) -> None:
        """Count the files the model phase reads (bench/startup.py sets its rate beside a plain
        read's)."""
        self.model_bytes = (self.model_bytes or 0) + sum(f.stat().st_size for f in files)

    def phases(self) -> dict[str, float | int]:
        """Each start-up phase's seconds (those that ran) and the model bytes read."""
        spent: dict[str, float | int]
        spent = {f"{p}_s": round(self.spent[p], 3) for p in STARTUP if p in self.spent}
        return spent | ({"model_bytes": self.model_bytes} if self.model_bytes is not None else {})

    def take_ranks(
        self, outcome: dict[str, Any], in_process: bool, launched: float | None = None
    ) -> None:
        """A launched point's rank 0's marks and phases (none where this process was the rank:
        it spent them in this process's own) and, given when it `launched` (on rank 0's host,
        whose clock its process start reads), the launcher's seconds."""
        self.marks.update({Mark(m): at for m, at in outcome.get("timeline", {}).items()})
        if in_process:
            return
        self.rank_phases.update(outcome.get("phases", {}))
        if launched is not None and "started" in outcome:
            self.rank_phases[f"{Phase.LAUNCHER}_s"] = round(outcome["started"] - launched, 3)

    def since_start(self) -> dict[str, Any]:
        """This job's start (its process's, what Snakemake started, for the first job a process
        runs) and each mark, in seconds after it."""
        seconds = {f"{mark}_s": round(at - self.begun, 3) for mark, at in self.marks.items()}
        started = dt.datetime.fromtimestamp(self.begun, dt.UTC).isoformat(timespec="seconds")
        ended = {"end_s": round(time.time() - self.begun, 3), "phases": self.phases()}
        ended |= {"rank_phases": dict(self.rank_phases)} if self.rank_phases else {}
        return {"started_at": started, **seconds, **ended}


_PROCESS: list[Timeline] = []  # before any job begins (a rank's program): the process's
_JOBS: list[Timeline] = []  # each job this process began (one process may run several)


def current() -> Timeline:
    """The running job's timeline; before any job begins, the process's."""
    if _JOBS:
        return _JOBS[-1]
    if not _PROCESS:
        _PROCESS.append(Timeline(process_start()))
    return _PROCESS[0]


def begin_job() -> Timeline:
    """A job begins, its phases its own: the process's first from the process's start, with
    the process's imports; a later one from now (after the job before it)."""
    first, before = not _JOBS, current()
    job = Timeline(process_start() if first else time.time())
    if first and Phase.IMPORTS in before.spent:
        job.spent[Phase.IMPORTS] = before.spent[Phase.IMPORTS]
    _JOBS.append(job)
    return job


def starting() -> None:
    """A program starts: no garbage collection during its imports. torch and transformers make
    ~650k objects that live to the end; collecting among them cost a quarter of the imports."""
    gc.disable()


def imported() -> None:
    """A program's imports are done (its entry point calls this): from the process's start."""
    current().spent[Phase.IMPORTS] = time.time() - process_start()
    settled()


def settled() -> None:
    """What exists now lives to the end: out of every later collection's sight, finalization's
    included (which otherwise spends about a second at exit walking the imported modules)."""
    gc.freeze()
    gc.enable()


def phase(name: str) -> Any:
    """The running job's phase `name` (Timeline.phase)."""
    return current().phase(name)


def mark(name: str) -> None:
    current().mark(name)


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
