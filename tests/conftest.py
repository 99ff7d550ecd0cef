"""Shared fixtures: a tiny random Llama with an in-process tokenizer, and stand-in rows."""

from __future__ import annotations

import os

# OpenMP threads sleep when idle rather than spin: two workers and their jobs share two cores,
# and a spinning thread holds a core another process needs (11% less CPU time over the heavy
# tests, measured). Set before torch loads libgomp, which reads it once; subprocesses inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
# the rules call the `accelstudy` CLI: the running interpreter's bin dir must be on PATH
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
torch.set_num_threads(min(2, os.cpu_count() or 1))

SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
TINY_CONFIG = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())  # the tests' study
EVAL_SETTINGS = {
    "block_size": 64,
    "batch_size": 4,
    "hellaswag_max_length": 2048,
    "boolq_max_length": 512,
    "lm_eval_max_length": 256,
    "dtype": "float32",
}


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer): 2 layers, hidden 64, vocab 512; deterministic."""
    from accelstudy.models import tiny_random_llama

    return tiny_random_llama(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, seed=0)


@pytest.fixture(scope="session")
def tiny_bos():
    """The same model with a tokenizer that, like Llama's, prepends BOS to every text."""
    from accelstudy.models import tiny_random_llama

    return tiny_random_llama(
        layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, seed=0, add_bos=True
    )


@pytest.fixture(scope="session")
def cpu():
    from accelstudy.device import resolve

    return resolve("cpu")


@pytest.fixture(scope="session")
def standin():
    from accelstudy.data.standin import standin_rows

    return {
        "wikitext": standin_rows("wikitext", "test"),
        "hellaswag": standin_rows("hellaswag", "validation"),
        "boolq": standin_rows("boolq", "validation"),
    }


@pytest.fixture(scope="session", autouse=True)
def pysm_local_data(tmp_path_factory):
    """config/paper.yaml asks for PySM's d1 preset, whose templates a user keeps under
    $PYSM_LOCAL_DATA; planning needs only that they are there, so empty stand-ins do."""
    from accelstudy.data.dust import preset_files

    root = tmp_path_factory.mktemp("pysm-data")
    for name in preset_files("d1", 2048):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    previous = os.environ.get("PYSM_LOCAL_DATA")
    os.environ["PYSM_LOCAL_DATA"] = str(root)
    yield root
    if previous is None:
        del os.environ["PYSM_LOCAL_DATA"]
    else:
        os.environ["PYSM_LOCAL_DATA"] = previous


def snakemake(
    workdir: Path, *args: str, config: dict | None = None, umask: int = -1
) -> subprocess.CompletedProcess:
    """Snakemake on a study (by default the tiny one) in `workdir`."""
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config or TINY_CONFIG))
    cmd = [*SNAKEMAKE, "--directory", str(workdir), "--configfile", str(config_path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, umask=umask)


def planned_jobs(result: subprocess.CompletedProcess) -> dict[str, int]:
    """Job counts from a dry run's 'Job stats' table."""
    counts, in_table = {}, False
    for line in result.stdout.splitlines():
        if line.startswith("job ") and "count" in line:
            in_table = True
            continue
        if in_table:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                if parts[0] == "total":
                    break
                counts[parts[0]] = int(parts[1])
    return counts


@pytest.fixture(scope="session")
def study(tmp_path_factory):
    """The tiny study run once for the whole session (every module that needs its results)."""
    workdir = tmp_path_factory.mktemp("study")
    # a project directory shared with a group: results must come out group-readable
    result = snakemake(workdir, "--cores", "2", umask=0o002)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir
