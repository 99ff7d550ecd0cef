"""Records (one JSON per job) -> one tidy table, one row per job."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from accelstudy.paths import RESOURCES

SOURCE_LABELS = {"standin": "stand-in", "hf": "Hugging Face", "local": "local file"}


def flatten(record: dict) -> dict:
    """The columns a table needs; nested metrics become metric_* columns."""
    metrics = record["metrics"]
    primary = metrics.get("primary_metric")
    row = {
        "study": record["study"],
        "stage": record["stage"],
        "system": record["system"],
        "device": record["device"],
        "model": record["model"],
        "task": record["task"],
        "method": record["method"],
        "protocol": record.get("protocol", ""),
        "data": SOURCE_LABELS.get(record["data_source"], record["data_source"]),
        "metric": primary,
        "value": metrics.get(primary) if primary else None,
        "tokens_per_s": metrics["tokens_per_s"],
        "peak_memory_mib": round(metrics["peak_memory_bytes"] / 2**20, 1),
        "wall_time_s": metrics["wall_time_s"],
        "git_commit": record["provenance"]["git_commit"],
        "config_hash": record["provenance"]["config_hash"],
        "device_name": record["provenance"]["hardware"].get("device_name", ""),
    }
    for key, value in metrics.items():
        if isinstance(value, int | float) and key not in row:
            row[f"metric_{key}"] = value
    return row


def collect_records(paths: Iterable[str | Path]) -> pd.DataFrame:
    rows = [flatten(json.loads(Path(p).read_text())) for p in sorted(map(str, paths))]
    return pd.DataFrame(rows)


def load_published() -> pd.DataFrame:
    return pd.read_csv(RESOURCES / "published.csv", dtype={"split": str})
