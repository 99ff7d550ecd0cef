"""Where the project's own files live, so the package finds schemas and resources."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = PROJECT_ROOT / "workflow" / "schemas"
RESOURCES = PROJECT_ROOT / "resources"
SYSTEMS = PROJECT_ROOT / "config" / "systems"
