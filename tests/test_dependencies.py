"""Every third-party module the package imports is a declared dependency: a wheel installed
from pyproject.toml alone must not fail on an import the checkout's venv happened to hold."""

import ast
import re
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workflow" / "accelstudy"
# imported only on a platform whose environment file installs it: no extra can (optimum-habana
# pins a transformers older than the dependencies'); module -> (that file, what it names there)
PLATFORM = {
    "habana_frameworks": ("envs/gaudi/Dockerfile", "pytorch-installer"),  # Habana's container
    "neural_compressor": ("envs/gaudi/requirements.txt", "neural-compressor-pt=="),
    "optimum": ("envs/gaudi/requirements.txt", "optimum-habana=="),
    "pyhlml": ("envs/gaudi/requirements.txt", "pyhlml=="),
    "pynvml": ("envs/cuda.yaml", "nvidia-ml-py=="),
}


def _name(text: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", text).lower()


@cache
def imported() -> dict[str, str]:
    """Each third-party top-level module any of the package's files imports (at any depth: a
    stage imports what it uses when it runs) -> one file importing it."""
    found: dict[str, str] = {}
    for file in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {name.split(".")[0] for name in names}:
                if top not in sys.stdlib_module_names and top != "accelstudy":
                    found.setdefault(top, str(file.relative_to(ROOT)))
    return found


def declared() -> dict[str, str]:
    """Distribution -> where pyproject.toml declares it: `dependencies` or `[<extra>]`. dev's
    tools (tests, linters) are not the package's: a module it imports must not come from them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lists = {"dependencies": project["dependencies"]}
    lists |= {f"[{x}]": deps for x, deps in project["optional-dependencies"].items() if x != "dev"}
    spelled = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
    return {_name(spelled.match(d)[0]): where for where, deps in lists.items() for d in deps}


def allowed_under(module: str, where: dict[str, str], providers: dict[str, list[str]]) -> str:
    """Where a module's distribution is declared ('' for nowhere): pyproject.toml's
    dependencies or an extra, or (PLATFORM) the environment file of the platform."""
    if module in PLATFORM:
        return PLATFORM[module][0]
    return next((where[_name(d)] for d in providers.get(module, []) if _name(d) in where), "")


def test_every_third_party_import_is_declared():
    where, providers = declared(), metadata.packages_distributions()
    allowed = {module: allowed_under(module, where, providers) for module in imported()}
    undeclared = {
        m: f"{imported()[m]}, from {providers.get(m)}" for m, w in allowed.items() if not w
    }
    # each module's place (dependencies, [extra] or a platform's file) shown when one is missing
    assert undeclared == {}, f"declare them in pyproject.toml's dependencies (pinned); {allowed}"


def test_each_platform_module_is_imported_and_installed_by_its_environment():
    """The allow-list holds no stale entry, and each one's environment file does install it."""
    for module, (file, named) in PLATFORM.items():
        assert module in imported(), f"{module}: the package no longer imports it; drop it"
        assert named in (ROOT / file).read_text(), f"{file} does not install {module} ({named})"
