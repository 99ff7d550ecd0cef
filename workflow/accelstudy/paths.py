"""Where the project's own files live, so the package finds schemas and resources."""

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = PROJECT_ROOT / "workflow" / "schemas"
RESOURCES = PROJECT_ROOT / "resources"
SYSTEMS = PROJECT_ROOT / "config" / "systems"


def put_cli_on_path(environ: MutableMapping[str, str], interpreter: str = sys.executable) -> None:
    """Jobs call the `accelstudy` CLI installed beside the Python running Snakemake, so
    `.venv/bin/snakemake` works without activating the venv (SLURM jobs inherit PATH)."""
    bin_dir = os.path.dirname(interpreter)
    if os.path.exists(os.path.join(bin_dir, "accelstudy")):
        environ["PATH"] = os.pathsep.join([bin_dir, environ.get("PATH", "")])
