"""Records (one JSON per job) -> one tidy table, one row per job."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from accelstudy.paths import RESOURCES
from accelstudy.report.tables import bit_order, bits_label

SOURCE_LABELS = {"standin": "stand-in", "hf": "Hugging Face", "local": "local file"}
# a fine-tuning or SR3 point's parameters the tables group by, and the per-rank model-state bytes
POINT_KEYS = ("strategy", "attention", "cards", "devices", "repeat")
MODEL_STATE_KEYS = ("params_trainable", "params_frozen", "grads", "master_fp32", "optimizer_states")
NAN = float("nan")


def flatten(record: dict) -> dict:
    """The columns a table needs; numeric metrics (and those of a nested dict, such as the
    planner's `predicted`) become metric_* columns. Speed and memory are NaN where a point
    did not run (fine-tuning statuses other than ok)."""
    metrics = record["metrics"]
    primary = metrics.get("primary_metric")
    rank0 = (metrics.get("model_state_bytes") or [{}])[0]
    provenance = record["provenance"]
    row = {
        **{key: record[key] for key in ("study", "stage", "system", "device", "model", "task",
                                        "method")},
        "protocol": record.get("protocol", ""),
        "data": SOURCE_LABELS.get(record["data_source"], record["data_source"]),
        "metric": primary, "value": metrics.get(primary) if primary else None,
        "tokens_per_s": metrics.get("tokens_per_s", NAN),
        "peak_memory_mib": round(metrics.get("peak_memory_bytes", NAN) / 2**20, 1),
        "status": metrics.get("status", ""),
        "peak_memory_method": metrics.get("peak_memory_method", ""),
        **{key: record["parameters"].get(key) for key in POINT_KEYS},
        "model_states_rank0": sum(rank0.get(key, NAN) for key in MODEL_STATE_KEYS),
        "wall_time_s": metrics["wall_time_s"], "git_commit": provenance["git_commit"],
        "config_hash": provenance["config_hash"],
        "device_name": provenance["hardware"].get("device_name", ""),
    }  # fmt: skip
    for key, value in metrics.items():
        for name, number in value.items() if isinstance(value, dict) else [("", value)]:
            column = f"{key}_{name}" if name else key
            if isinstance(number, int | float) and column not in row:
                row[f"metric_{column}"] = number
    return row


def collect_records(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per record, with its path (files written beside it, such as SR3 samples)."""
    rows = [
        {**flatten(json.loads(Path(p).read_text())), "record": p} for p in sorted(map(str, paths))
    ]
    return pd.DataFrame(rows)


def _assigned(spec: dict, name: str, layer: int) -> int:
    """The bits an assignment gives one pruned target (a layer, or a module of one)."""
    return spec["module_bits"][name] if "module_bits" in spec else spec["layer_bits"][str(layer)]


def collect_sensitivity(tables: Iterable[str | Path],
                        assignments: Iterable[str | Path]) -> pd.DataFrame:  # fmt: skip
    """Gathered sensitivity tables, a row per (model, task, target), with the bits every bit
    list assigned ("16 / 8 / 8", in the paper's order); model and task come from the paths."""
    specs: dict[tuple[str, str], list[dict]] = {}
    for path in map(Path, assignments):
        specs.setdefault((path.parents[3].name, path.parents[2].name), []).append(
            json.loads(path.read_text())
        )
    frames = []
    for path in map(Path, tables):
        model, task = path.parents[2].name, path.parents[1].name
        frame = pd.read_csv(path).assign(model=model)
        found = {bits_label(s["bits"]): s for s in specs.get((model, task), [])}
        order = bit_order(found)
        frame["bit_lists"] = " / ".join(order)
        frame["bits"] = [" / ".join(str(_assigned(found[b], n, i)) for b in order)
                         for n, i in zip(frame["name"], frame["layer"], strict=True)]  # fmt: skip
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_published() -> pd.DataFrame:
    return pd.read_csv(RESOURCES / "published.csv", dtype={"split": str})
