"""Where the project's own files live, so the package finds schemas and resources.

The package reads files beside it in the repository (workflow/schemas, config/systems,
config/paper.yaml, profiles/<site>/site.yaml and config.yaml, envs/gaudi, resources). Built as
a wheel, those go along as data files under <prefix>/share/accelstudy in the same layout
(pyproject.toml's [tool.setuptools.data-files]). One rule picks the root all of them are read
from: the first of $ACCELSTUDY_ROOT (the Snakefile sets it to its own folder), the checkout the
package is imported from, and the installed package's copy that holds
workflow/schemas/config.schema.yaml.
"""

import os
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from importlib import metadata
from pathlib import Path

from accelstudy.errors import StudyError

# present in every root: a folder without it is not one (a workflow copied without the schemas)
MARKER = Path("workflow", "schemas", "config.schema.yaml")
# the repository when the package runs from a checkout (editable install); a site-packages
# folder when installed from a wheel, which never holds the marker
CHECKOUT = Path(__file__).resolve().parents[2]
INSTALLED = "share/accelstudy"  # where pip puts the data files, under the install prefix


def _installed_copy() -> Iterator[Path]:
    """The data files pip installed with this package, found through its RECORD (the prefix
    differs between a venv, a --user install and conda)."""
    try:
        files = metadata.files("accelstudy") or []
    except metadata.PackageNotFoundError:
        return
    for file in files:
        if file.as_posix().endswith(f"{INSTALLED}/{MARKER.as_posix()}"):
            yield Path(str(file.locate())).resolve().parents[len(MARKER.parts) - 1]


def candidates(environ: Mapping[str, str]) -> Iterator[Path]:
    """Where the project's files may be, in the order they win: an explicit root first, so the
    Snakemake process and its jobs (which inherit the variable) read the same files."""
    if environ.get("ACCELSTUDY_ROOT"):
        yield Path(environ["ACCELSTUDY_ROOT"])
    yield CHECKOUT
    yield from _installed_copy()


def find_root(environ: Mapping[str, str]) -> Path | None:
    """The first candidate that holds the project's files, or None."""
    return next((root.resolve() for root in candidates(environ) if (root / MARKER).is_file()), None)


# None found: the checkout's paths stand, and require_project_files says so in one line before
# a stage or the Snakefile reads them (an import must not fail: the CLI prints errors as lines)
PROJECT_ROOT = find_root(os.environ) or CHECKOUT
SCHEMAS = PROJECT_ROOT / "workflow" / "schemas"
RESOURCES = PROJECT_ROOT / "resources"
SYSTEMS = PROJECT_ROOT / "config" / "systems"
PROFILES = PROJECT_ROOT / "profiles"  # the sites' (accelstudy.site names the one to use)
PAPER = PROJECT_ROOT / "config" / "paper.yaml"  # the published study


def require_project_files() -> None:
    """One line naming where it looked, instead of a FileNotFoundError deep inside a stage."""
    if not (PROJECT_ROOT / MARKER).is_file():
        tried = ", ".join(str(root) for root in candidates(os.environ))
        raise StudyError(
            f"the project's files ({MARKER}, config/systems, resources) are in none of: {tried}; "
            "set ACCELSTUDY_ROOT to a checkout of accelstudy, or reinstall the package"
        )


def export_for_jobs(environ: MutableMapping[str, str], interpreter: str = sys.executable) -> None:
    """What jobs and `--sdm conda` environments need from the process running Snakemake:
    ACCELSTUDY_ROOT, which envs/*.yaml install the package from (conda copies an env file under
    .snakemake/conda/, so a relative path would point there), and PATH, so jobs find the
    `accelstudy` beside this Python without an activated venv (SLURM jobs inherit both)."""
    environ.setdefault("ACCELSTUDY_ROOT", str(PROJECT_ROOT))
    bin_dir = os.path.dirname(interpreter)
    if os.path.exists(os.path.join(bin_dir, "accelstudy")):
        environ["PATH"] = os.pathsep.join([bin_dir, environ.get("PATH", "")])
