"""Where the project's own files live, so the package finds schemas and resources."""

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = PROJECT_ROOT / "workflow" / "schemas"
RESOURCES = PROJECT_ROOT / "resources"
SYSTEMS = PROJECT_ROOT / "config" / "systems"


def export_for_jobs(environ: MutableMapping[str, str], interpreter: str = sys.executable) -> None:
    """What jobs and `--sdm conda` environments need from the process running Snakemake:
    ACCELSTUDY_ROOT, which envs/*.yaml install the package from (conda copies an env file under
    .snakemake/conda/, so a relative path would point there), and PATH, so jobs find the
    `accelstudy` beside this Python without an activated venv (SLURM jobs inherit both)."""
    environ.setdefault("ACCELSTUDY_ROOT", str(PROJECT_ROOT))
    bin_dir = os.path.dirname(interpreter)
    if os.path.exists(os.path.join(bin_dir, "accelstudy")):
        environ["PATH"] = os.pathsep.join([bin_dir, environ.get("PATH", "")])
