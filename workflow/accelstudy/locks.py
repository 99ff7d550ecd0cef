"""Remove the `.snakemake/locks/` a killed Snakemake run leaves ("Directory cannot be locked"
on the next run), but only when no Snakemake process works in this directory."""

import os
import shutil
from pathlib import Path

import psutil

from accelstudy.errors import StudyError


class LockHeldError(StudyError, RuntimeError):
    """Snakemake's lock belongs to a Snakemake that is still running."""


def snakemake_pids(directory: Path) -> list[int]:
    """Snakemake processes working in `directory`, or whose directory we may not read."""
    here = directory.resolve()
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        info = proc.info
        # `snakemake ...`, `python .../bin/snakemake ...` or `python -m snakemake ...`
        snakemake = any(Path(arg).name == "snakemake" for arg in (info["cmdline"] or [])[:3])
        if info["pid"] == os.getpid() or not snakemake:
            continue
        if info["cwd"] is None or Path(info["cwd"]).resolve() == here:
            pids.append(info["pid"])
    return pids


def unlock_if_stale(directory: Path) -> str:
    """Remove a stale lock in `directory`; say so in one line ("" when there was none)."""
    locks = Path(directory) / ".snakemake" / "locks"
    if not any(locks.glob("*.lock")):
        return ""
    pids = snakemake_pids(Path(directory))
    if pids:
        raise LockHeldError(
            f"Snakemake (pid {', '.join(map(str, pids))}) is running in {directory}: wait for "
            "it, or stop it, then run `make study` again (check with `ps -fp <pid>`)"
        )
    shutil.rmtree(locks)
    return (
        f"Removed the lock a killed Snakemake run left in {directory} (no Snakemake runs "
        "there now; a run on another host sharing it would not be seen).\n"
    )
