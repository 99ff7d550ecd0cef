"""When a job's phases began, so the report can set the time before its measured work (process
start, imports, loading the model and data, warm-up) beside the measured work itself."""

import datetime as dt
import time

import psutil

MARKS: dict[str, float] = {}  # epoch seconds: "ready" (model and data), "measured" (first timed)


def mark(phase: str) -> None:
    """The first time this process reaches `phase` (a later repeat keeps the first)."""
    MARKS.setdefault(phase, time.time())


def since_start() -> dict[str, float | str]:
    """This process's start (what Snakemake started) and each phase, in seconds after it."""
    start = psutil.Process().create_time()
    seconds = {f"{phase}_s": round(at - start, 3) for phase, at in MARKS.items()}
    started = dt.datetime.fromtimestamp(start, dt.UTC).isoformat(timespec="seconds")
    return {"started_at": started, **seconds, "end_s": round(time.time() - start, 3)}
