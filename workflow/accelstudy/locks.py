"""`make study` and Snakemake's lock: a killed run leaves `.snakemake/locks/` ("Directory cannot
be locked" next time), and Snakemake's lock files name no host. So each `make study` run notes
its host and process beside them while it runs; only a lock whose noted process is gone from
this host is removed, any other (another host's, a run started by hand) stays, its owner named.
A dry run takes no lock (Snakemake's neither), so it is never refused for one."""

import contextlib
import fcntl
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from accelstudy.errors import StudyError
from accelstudy.files import read_json, read_yaml

OWNER = Path(".snakemake") / "accelstudy-owner.json"  # beside locks/: Snakemake reads *.lock


class LockHeldError(StudyError, RuntimeError):
    """Snakemake's lock belongs to a run that may still be working here."""


def unlock_if_stale(directory: Path, command: Sequence[str] = ()) -> str:
    """Remove the lock of a run of ours that died on this host; say so in one line (or ""). A
    lock that stays names the `command` that was refused, to unlock with and to run again."""
    locks = Path(directory) / ".snakemake" / "locks"
    if not any(locks.glob("*.lock")):
        return ""
    owner_file = Path(directory) / OWNER
    owner = read_json(owner_file) if owner_file.is_file() else {}
    again = f"run `{shlex.join(command)}` again" if command else "run your command again"
    host, pid = owner.get("host"), owner.get("pid")
    if host != platform.node() or not isinstance(pid, int):
        who = f"process {pid} on host {host}" if host else "a Snakemake started by hand (or killed)"
        unlock = shlex.join([*command, "--unlock"]) if command else "snakemake --unlock"
        raise LockHeldError(
            f"{directory} is locked by {who}: wait for it, or, once sure it has stopped, run "
            f"`{unlock}` there, then {again}"
        )
    # the noted process, or a Snakemake it left running here (its owner killed outright)
    if alive := [pid] if _is_snakemake(pid) else _snakemakes_in(Path(directory)):
        raise LockHeldError(
            f"Snakemake (pid {alive[0]}) is running in {directory}: wait for it, or stop it, then "
            f"{again} (check with `ps -fp {alive[0]}`)"
        )
    shutil.rmtree(locks)
    return f"Removed the lock of a killed run in {directory} (process {pid} on {host} is gone).\n"


def _named(cmdline: list[str]) -> bool:
    return any(Path(arg).name == "snakemake" for arg in cmdline[:3])


def _snakemakes_in(directory: Path) -> list[int]:
    """This host's Snakemake processes working in `directory` (or whose directory is hidden)."""
    here, found = directory.resolve(), []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        pid, cwd = proc.info["pid"], proc.info["cwd"]
        here_too = cwd is None or Path(cwd).resolve() == here
        if _named(proc.info["cmdline"] or []) and pid != os.getpid() and here_too:
            found.append(pid)
    return found


def _is_snakemake(pid: int) -> bool:
    """`snakemake ...`, `python -m snakemake ...`, or `accelstudy snakemake ...` (the owner noted
    while its Snakemake runs); a reused pid is not the run."""
    try:
        return _named(psutil.Process(pid).cmdline())
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's process: assume the worst
        return True


def is_dry_run(command: Sequence[str]) -> bool:
    """-n, --dry-run (--dryrun), or -n among bundled short flags (-np)."""
    return any(a in ("--dry-run", "--dryrun") or re.fullmatch(r"-[pqrkFT]*n[pqrkFT]*", a)
               for a in command)  # fmt: skip


def configfiles(command: list[str]) -> list[str]:
    """The study files a Snakemake command names (--configfile/--configfiles A [B ...])."""
    found, taking = [], False
    for arg in command:
        taking = arg in ("--configfile", "--configfiles") or (taking and not arg.startswith("-"))
        if taking and not arg.startswith("-"):
            found.append(arg)
    return found


def run_snakemake(directory: Path, command: list[str]) -> int:
    """unlock_if_stale, then run `command` with this process noted as the lock's owner for as
    long as it runs: once it has ended the note goes, so a lock a later run takes (by hand, or
    from another host) is never taken for this one's. A dry run just runs: it takes no lock."""
    if not command:
        raise StudyError("give the command to run: accelstudy snakemake snakemake --cores 2 ...")
    for study_file in configfiles(command):  # before Snakemake's loader, which expands aliases
        read_yaml(study_file)
    if is_dry_run(command):
        return subprocess.call(command)
    print(unlock_if_stale(directory, command), end="", flush=True)
    owner_file = Path(directory) / OWNER
    owner_file.parent.mkdir(exist_ok=True)
    owner = {"host": platform.node(), "pid": os.getpid(), "command": command}
    owner_file.write_text(json.dumps(owner) + "\n")
    try:
        run = subprocess.Popen(command)
        while True:  # Ctrl-C reaches Snakemake too (one process group): let it finish cleanly
            with contextlib.suppress(KeyboardInterrupt):
                return run.wait()
    finally:
        owner_file.unlink(missing_ok=True)


# One writer per results folder --------------------------------------------------------------
RUN_LOCK = ".accelstudy-run.json"  # in the results folder: a run from any checkout or host sees it


def take_results_lock(results: Path, checkout: Path) -> None:
    """Note this run (host, process, checkout) in the results folder, or refuse in one line while
    another run's note stands: Snakemake's own lock lives in the working directory, so two
    checkouts sharing one results folder would each run the same jobs. A note left by a run
    whose process is gone from this host is replaced. Taken as jobs start (`onstart`), never
    by a dry run."""
    lock, me = Path(results) / RUN_LOCK, {"host": platform.node(), "pid": os.getpid()}
    lock.parent.mkdir(parents=True, exist_ok=True)
    # one run at a time reads, replaces and writes the note: two runs that both found a dead
    # run's note would each remove the other's new one, and a note read while it is being
    # written looks cut short
    with (lock.parent / f"{RUN_LOCK}.guard").open("a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        _take(lock, me, results, checkout)


def _take(lock: Path, me: dict[str, Any], results: Path, checkout: Path) -> None:
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _read_note(lock)
            host, pid = owner.get("host"), owner.get("pid")
            dead = host == me["host"] and (not isinstance(pid, int) or not psutil.pid_exists(pid))
            gone = dead or not owner  # a note cut short as its run was killed
            if gone or (host, pid) == (me["host"], me["pid"]):  # a dead run's, or this one's
                lock.unlink(missing_ok=True)
                continue
            raise LockHeldError(
                f"{results} is being written by process {pid} on host {host} (checkout "
                f"{owner.get('checkout')}): wait for it, or, once sure it has stopped, "
                f"delete {lock}"
            ) from None
        with os.fdopen(fd, "w") as handle:
            json.dump(me | {"checkout": str(checkout)}, handle)
        return
    raise LockHeldError(f"{results}: another run took {lock} as this one replaced a stale note; "
                        "check which runs there, then run again")  # fmt: skip


def release_results_lock(results: Path) -> None:
    """Remove this run's note (`onsuccess`, `onerror`); another run's is left alone."""
    lock = Path(results) / RUN_LOCK
    owner = _read_note(lock)
    if (owner.get("host"), owner.get("pid")) == (platform.node(), os.getpid()):
        lock.unlink(missing_ok=True)


def _read_note(lock: Path) -> dict:
    """A run's note, or {} where it is gone or damaged (a run killed while writing it)."""
    try:
        note = read_json(lock)
    except (StudyError, FileNotFoundError):
        return {}
    return note if isinstance(note, dict) else {}
