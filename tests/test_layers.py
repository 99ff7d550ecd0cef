"""Every import points down: a module imports only from its own layer or below (README,
"Layout"), and the three parts never import each other."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "workflow" / "accelstudy"
LAYERS = {  # from the ground up; a package name stands for its modules
    1: [
        "__init__",
        "paths",
        "errors",
        "files",
        "device",
        "systems",
        "locks",
        "timeline",
        "energy",
        "cost",
        "accounting",
        "flops",
        "peak",
    ],
    2: ["tasks", "points"],
    3: ["config", "records"],
    4: ["data", "models", "snapshots"],
    5: ["evaluate", "launch", "ranks"],
    6: ["ptq", "finetune", "diffusion"],
    7: ["report", "study", "site", "targets"],
    8: ["cli", "__main__"],
}
LAYER_OF = {name: layer for layer, names in LAYERS.items() for name in names}
PARTS = set(LAYERS[6])


def unit(module: str) -> str:
    """'accelstudy.ptq.clustering' -> 'ptq'; 'accelstudy' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path) -> set[str]:
    """Every accelstudy module `path` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("accelstudy")
        ):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("accelstudy")}
    return {name for name in found if unit(name) in LAYER_OF or name == "accelstudy"}


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_imports_point_down(path):
    own = unit("accelstudy." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    assert own in LAYER_OF, f"{path.name}: give its module a layer in LAYERS (and the README)"
    upward = [name for name in imports(path) if LAYER_OF[unit(name)] > LAYER_OF[own]]
    across = [name for name in imports(path) if own in PARTS and unit(name) in PARTS - {own}]
    assert not upward, f"{own} (layer {LAYER_OF[own]}) imports a layer above: {upward}"
    assert not across, f"part {own} imports another part: {across}"


def test_the_check_sees_an_upward_import(tmp_path):
    """The check itself: a layer-1 module importing the CLI is caught."""
    bad = tmp_path / "files.py"
    bad.write_text("def f():\n    from accelstudy.cli import main\n")
    assert [unit(n) for n in imports(bad)] == ["cli", "cli"]


def test_reading_the_workflow_and_the_cli_imports_no_torch():
    """Snakemake parses the rules on every invocation, and `accelstudy --help` is a CLI start:
    neither may pay for torch (or pandas, transformers, lm_eval)."""
    code = (
        "import sys; import accelstudy.targets, accelstudy.study, accelstudy.site, accelstudy.cli;"
        "heavy = {'torch', 'transformers', 'lm_eval', 'pandas', 'seaborn'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
