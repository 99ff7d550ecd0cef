"""`make study` after a killed run: only the lock of a run of ours whose process is gone from
this host is removed; a live run's, another host's or a hand-started run's lock stays, named
with the command that was refused; a dry run is never refused."""

from __future__ import annotations

import json
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accelstudy.locks import OWNER, LockHeldError, is_dry_run, unlock_if_stale


def _lock(directory: Path, host: str | None = None, pid: int | None = None) -> Path:
    locks = directory / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/x.json\n")
    if host:
        (directory / OWNER).write_text(json.dumps({"host": host, "pid": pid}))
    return locks


@pytest.fixture()
def running(tmp_path) -> Iterator[tuple[Path, int]]:
    """A process that looks like Snakemake (`python .../snakemake`), working in a folder."""
    script = tmp_path / "bin" / "snakemake"
    script.parent.mkdir()
    script.write_text("import time\ntime.sleep(60)\n")
    workdir = tmp_path / "study"
    workdir.mkdir()
    proc = subprocess.Popen([sys.executable, str(script)], cwd=workdir)
    try:
        yield workdir, proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_no_lock_nothing_to_do(tmp_path):
    assert unlock_if_stale(tmp_path) == ""


def test_a_dead_runs_lock_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    locks = _lock(tmp_path, platform.node(), int(dead.stdout))
    assert unlock_if_stale(tmp_path).startswith("Removed the lock of a killed run")
    assert not locks.exists()


def test_a_live_runs_lock_stays(running):
    workdir, pid = running
    locks = _lock(workdir, platform.node(), pid)
    with pytest.raises(LockHeldError, match=f"Snakemake \\(pid {pid}\\) is running in"):
        unlock_if_stale(workdir)
    assert locks.is_dir()
    marker = workdir / "ran"  # the command never starts
    done = subprocess.run([sys.executable, "-m", "accelstudy", "snakemake", "touch", str(marker)],
                          cwd=workdir, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "wait for it, or stop it" in done.stderr
    assert not marker.exists() and locks.is_dir()


@pytest.mark.parametrize(("host", "says"), [("login02", "process 4242 on host login02"),
                                            (None, "a Snakemake started by hand")])  # fmt: skip
def test_another_hosts_or_a_hand_started_lock_stays(tmp_path, host, says):
    locks = _lock(tmp_path, host, 4242)
    with pytest.raises(LockHeldError, match=says):
        unlock_if_stale(tmp_path)
    assert (locks / "0.output.lock").is_file()


def test_a_run_notes_its_host_and_process_while_it_runs(tmp_path):
    """The owner noted is the process running the command (its parent), on this host; once
    the command has ended the note goes, so a later hand-started run's lock is not ours."""
    show = "import os, pathlib; print(os.getppid()); print(pathlib.Path(%r).read_text())"
    command = [sys.executable, "-c", show % str(OWNER)]
    done = subprocess.run([sys.executable, "-m", "accelstudy", "snakemake", *command],
                          cwd=tmp_path, capture_output=True, text=True, check=True)  # fmt: skip
    parent, noted = done.stdout.split("\n", 1)
    owner = json.loads(noted)
    assert owner["host"] == platform.node() and owner["pid"] == int(parent)
    assert not (tmp_path / OWNER).exists()
    failing = subprocess.run([sys.executable, "-m", "accelstudy", "snakemake", "false"],
                             cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert failing.returncode == 1 and not (tmp_path / OWNER).exists()


def test_a_snakemake_left_running_by_a_killed_owner_keeps_its_lock(running):
    """The noted process is gone (killed outright), but its Snakemake still works here."""
    workdir, pid = running
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    locks = _lock(workdir, platform.node(), int(dead.stdout))
    with pytest.raises(LockHeldError, match=f"Snakemake \\(pid {pid}\\) is running in"):
        unlock_if_stale(workdir)
    assert locks.is_dir()


def test_a_refused_lock_names_the_command_that_was_run(tmp_path):
    """Not `make study` when the user ran something else: their command, to unlock and rerun."""
    locks = _lock(tmp_path)  # a plain `snakemake` run, killed: no owner noted
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')", "--cores", "1"]
    done = subprocess.run([sys.executable, "-m", "accelstudy", "snakemake", *command],
                          cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    line = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in line and "make study" not in line, line
    assert f"`{shlex.join([*command, '--unlock'])}` there, then run `{shlex.join(command)}`" in line
    assert not marker.exists() and (locks / "0.output.lock").is_file()


@pytest.mark.parametrize("flag", ["-n", "--dry-run", "--dryrun", "-np"])
def test_a_dry_run_is_never_refused_for_a_lock(tmp_path, flag):
    """Snakemake's dry run takes no lock: it runs, the lock and the owner note left alone."""
    locks = _lock(tmp_path, "login02", 4242)
    owner = (tmp_path / OWNER).read_text()
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')", flag]
    done = subprocess.run([sys.executable, "-m", "accelstudy", "snakemake", *command],
                          cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert marker.exists() and (locks / "0.output.lock").is_file()
    assert (tmp_path / OWNER).read_text() == owner


@pytest.mark.parametrize(("args", "dry"), [(["-n"], True), (["-pn"], True), (["--dry-run"], True),
    (["--cores", "2"], False), (["-s", "Snakefile"], False), (["--notemp"], False)])  # fmt: skip
def test_what_counts_as_a_dry_run(args, dry):
    assert is_dry_run(["snakemake", *args]) is dry


def test_one_writer_per_results_folder_from_any_checkout(tmp_path):
    """Snakemake's own lock is per working directory: a run from another checkout or host on the
    same results folder is refused in one line before any job (its note left alone); a dry run
    is not; a note of a run gone from this host is replaced, and removed when the run ends."""
    from accelstudy.locks import RUN_LOCK

    from tests.conftest import snakemake

    note = tmp_path / "results" / "tiny" / RUN_LOCK
    note.parent.mkdir(parents=True)
    other = {"host": "login02", "pid": 4242, "checkout": "/home/b/accelstudy"}
    note.write_text(json.dumps(other))
    assert snakemake(tmp_path, "-n", "--until", "prepare_data").returncode == 0
    refused = snakemake(tmp_path, "--cores", "1", "--until", "prepare_data")
    said = [line for line in refused.stderr.splitlines() if "being written" in line]
    assert refused.returncode != 0 and len(said) == 1, refused.stderr[-2000:]
    assert "process 4242 on host login02 (checkout /home/b/accelstudy)" in said[0]
    assert json.loads(note.read_text()) == other  # another run's note stands
    assert not (tmp_path / "results" / "tiny" / "data").exists()  # no job ran
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout  # fmt: skip
    note.write_text(json.dumps({"host": platform.node(), "pid": int(dead)}))
    ran = snakemake(tmp_path, "--cores", "1", "--until", "prepare_data")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert not note.exists() and (tmp_path / "results" / "tiny" / "data").is_dir()


RACE = """
import sys, time
from pathlib import Path
from accelstudy.locks import LockHeldError, take_results_lock
start = float(sys.argv[2])
while time.time() < start:
    pass
try:
    take_results_lock(Path(sys.argv[1]), Path("."))
    print("took")
except LockHeldError:
    print("refused")
time.sleep(1.5)  # held while the others try
"""


def test_runs_that_find_a_dead_runs_note_at_once_let_one_through(tmp_path):
    """Six runs start on one results folder holding a dead run's note: one takes it, five are
    refused (without the guard, each removed the others' fresh note and several ran)."""
    import time

    for round_ in range(3):
        results = tmp_path / f"r{round_}"
        results.mkdir()
        (results / ".accelstudy-run.json").write_text(
            json.dumps({"host": platform.node(), "pid": 2**22 + 1, "checkout": "gone"})
        )
        start = str(time.time() + 2.0)
        runs = [subprocess.Popen([sys.executable, "-c", RACE, str(results), start],
                                 stdout=subprocess.PIPE, text=True) for _ in range(6)]  # fmt: skip
        said = sorted(run.communicate(timeout=60)[0].strip() for run in runs)
        assert said == ["refused"] * 5 + ["took"], said
