"""`make study` after a killed run: a stale Snakemake lock goes, a live run's lock stays."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accelstudy.cli import main
from accelstudy.locks import LockHeldError, snakemake_pids, unlock_if_stale


def _lock(directory: Path) -> Path:
    locks = directory / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/x.json\n")
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


def test_a_stale_lock_is_removed(tmp_path, running):
    locks = _lock(tmp_path)  # a Snakemake runs, but in another folder
    assert snakemake_pids(tmp_path) == []
    assert unlock_if_stale(tmp_path).startswith("Removed the lock a killed Snakemake run left")
    assert not locks.exists()


def test_a_live_runs_lock_stays(running, monkeypatch, capsys):
    workdir, pid = running
    locks = _lock(workdir)
    assert snakemake_pids(workdir) == [pid]
    with pytest.raises(LockHeldError, match=f"Snakemake \\(pid {pid}\\) is running in"):
        unlock_if_stale(workdir)
    assert locks.is_dir()
    monkeypatch.chdir(workdir)
    assert main(["unlock-if-stale"]) == 2
    assert "wait for it, or stop it" in capsys.readouterr().err
