"""Every benchmark's smoke run (`--tiny`): it exits 0 and prints its ratio lines."""

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py") if p.name != "common.py")


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_smoke_run_prints_its_ratio(script, tmp_path):
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"  # `accelstudy`
    env = os.environ | {"PATH": path, "TMPDIR": str(tmp_path), "HF_DATASETS_CACHE": str(tmp_path)}
    command = [sys.executable, f"bench/{script}", "--tiny"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert re.search(r"^ratio: .*\d\.\d+x", done.stdout, re.MULTILINE), done.stdout


def test_make_bench_runs_every_benchmark():
    """The full runs stay manual: `make bench` names each script."""
    makefile = (ROOT / "Makefile").read_text()
    assert [s for s in SCRIPTS if f"$(BIN)/python bench/{s}\n" not in makefile] == []
