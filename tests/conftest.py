"""Shared fixtures: a tiny random Llama with an in-process tokenizer, and stand-in rows."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# the rules call the `accelstudy` CLI: the running interpreter's bin dir must be on PATH
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
torch.set_num_threads(min(2, os.cpu_count() or 1))

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
