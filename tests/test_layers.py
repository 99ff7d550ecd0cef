"""Every import points down and no two modules of a layer import each other in a cycle: the
import-linter contracts of pyproject.toml (the layers of docs/development.md), as `make lint`
runs them, and the contracts seen to catch a break."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, **env}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_import_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Contracts: 2 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "contract"),
    [("files.py", "from accelstudy.cli import main", "accelstudy layers"),
     ("ptq/prune.py", "from accelstudy.finetune import planner", "accelstudy layers"),
     ("snapshots.py", "from accelstudy.models import load_prepared", "no import cycle")],
)  # fmt: skip
def test_the_contracts_see_an_upward_import_a_part_importing_a_part_and_a_cycle(
    tmp_path, module, bad_import, contract
):
    """A copy of the package with one bad import inside a function breaks its contract."""
    package = tmp_path / "accelstudy"
    shutil.copytree(ROOT / "workflow" / "accelstudy", package,
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (package / module).open("a") as handle:
        handle.write(f"\n\ndef _reaches_up():\n    {bad_import}\n")
    result = lint_imports(tmp_path, PYTHONPATH=str(tmp_path))
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout


def test_reading_the_workflow_and_the_cli_imports_no_torch():
    """Snakemake parses the rules on every invocation, and `accelstudy --help` is a CLI start:
    neither may pay for torch (or pandas, transformers, lm_eval). The rules' runtimes are
    forecasts (accelstudy.forecast), computed while parsing: the paper's on Perlmutter, and the
    default study's on this CPU (its peak from the probe's cache)."""
    code = (
        "import sys, yaml; import accelstudy.targets, accelstudy.study, accelstudy.site,"
        " accelstudy.cli; from accelstudy.config import validate_config;"
        "from accelstudy.systems import load_system; from accelstudy.forecast import StudyEstimates;"
        "study = lambda f: validate_config(yaml.safe_load(open(f)));"
        "StudyEstimates(study('config/paper.yaml'), load_system('perlmutter')).all();"
        "StudyEstimates(study('config/config.yaml'), load_system('cpu')).all();"
        "heavy = {'torch', 'transformers', 'lm_eval', 'pandas', 'seaborn'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)  # fmt: skip
    assert out.stdout.strip() == "[]"
