"""`make study` and Snakemake's lock: a killed run leaves `.snakemake/locks/` ("Directory cannot
be locked" on the next run). Snakemake's lock files name no host, so each run `make study`
starts notes its host and process beside them, and only a lock whose noted process is gone
from this host is removed; any other lock (another host's run on a shared filesystem, a run
started by hand) stays, with one line naming its owner."""

import json
import os
import platform
import shutil
from pathlib import Path

import psutil

from accelstudy.errors import StudyError

OWNER = Path(".snakemake") / "accelstudy-owner.json"  # beside locks/: Snakemake reads *.lock


class LockHeldError(StudyError, RuntimeError):
    """Snakemake's lock belongs to a run that may still be working here."""


def unlock_if_stale(directory: Path) -> str:
    """Remove the lock of a run of ours that died on this host; say so in one line ("" when
    there was none)."""
    locks = Path(directory) / ".snakemake" / "locks"
    if not any(locks.glob("*.lock")):
        return ""
    owner_file = Path(directory) / OWNER
    owner = json.loads(owner_file.read_text()) if owner_file.is_file() else {}
    host, pid = owner.get("host"), owner.get("pid")
    if host != platform.node() or not isinstance(pid, int):
        who = f"process {pid} on host {host}" if host else "a Snakemake not started by make"
        raise LockHeldError(
            f"{directory} is locked by {who}: wait for it, or, once sure it has stopped, run "
            "`snakemake --unlock` there, then `make study` again"
        )
    if _is_snakemake(pid):
        raise LockHeldError(
            f"Snakemake (pid {pid}) is running in {directory}: wait for it, or stop it, then run "
            f"`make study` again (check with `ps -fp {pid}`)"
        )
    shutil.rmtree(locks)
    return f"Removed the lock of a killed run in {directory} (process {pid} on {host} is gone).\n"


def _is_snakemake(pid: int) -> bool:
    """`snakemake ...`, `python .../bin/snakemake ...` or `python -m snakemake ...` (a reused pid
    is not the run)."""
    try:
        return any(Path(arg).name == "snakemake" for arg in psutil.Process(pid).cmdline()[:3])
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's process: assume the worst
        return True


def run_snakemake(directory: Path, command: list[str]) -> None:
    """unlock_if_stale, note this process (its pid is Snakemake's after exec) as the lock's
    owner, then become `command`."""
    if not command:
        raise StudyError("give the command to run: accelstudy snakemake snakemake --cores 2 ...")
    print(unlock_if_stale(directory), end="", flush=True)
    (Path(directory) / OWNER).parent.mkdir(exist_ok=True)
    owner = {"host": platform.node(), "pid": os.getpid(), "command": command}
    (Path(directory) / OWNER).write_text(json.dumps(owner) + "\n")
    os.execvp(command[0], command)
