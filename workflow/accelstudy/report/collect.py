"""Records (one JSON per job) -> one tidy table, one row per job."""

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from accelstudy.paths import RESOURCES
from accelstudy.points import bits_label
from accelstudy.report.tables import bit_order

SOURCE_LABELS = {"standin": "stand-in", "hf": "Hugging Face", "local": "local file"}
WHAT = ("study", "stage", "system", "device", "model", "task", "method")
# a fine-tuning or SR3 point's parameters the tables group by, and the per-rank model-state bytes
POINT_KEYS = ("strategy", "attention", "cards", "devices", "repeat")
MODEL_STATE_KEYS = ("params_trainable", "params_frozen", "grads", "master_fp32", "optimizer_states")
NAN = float("nan")
Files = Iterable[str | Path]


def flatten(record: dict) -> dict:
    """A record's table columns; numeric metrics (nested ones too) become metric_* columns."""
    metrics, provenance = record["metrics"], record["provenance"]
    primary = metrics.get("primary_metric")
    rank0 = (metrics.get("model_state_bytes") or [{}])[0]
    row = {
        **{key: record[key] for key in WHAT},
        "protocol": record.get("protocol", ""),
        "data": SOURCE_LABELS.get(record["data_source"], record["data_source"]),
        "metric": primary,
        "value": metrics.get(primary) if primary else None,
        "tokens_per_s": metrics.get("tokens_per_s", NAN),
        "peak_memory_mib": round(metrics.get("peak_memory_bytes", NAN) / 2**20, 1),
        # a point resumed from a checkpoint is shown, but its speed is no clean measurement
        "status": "ok-resumed"
        if metrics.get("clean_measurement") is False
        else metrics.get("status", ""),
        "peak_memory_method": metrics.get("peak_memory_method", ""),
        **{key: record["parameters"].get(key) for key in POINT_KEYS},
        "model_states_rank0": sum(rank0.get(key, NAN) for key in MODEL_STATE_KEYS),
        "wall_time_s": metrics["wall_time_s"],
        "git_commit": provenance["git_commit"],
        "config_hash": provenance["config_hash"],
        "device_name": provenance["hardware"].get("device_name", ""),
    }
    for key, value in metrics.items():
        for name, number in value.items() if isinstance(value, dict) else [("", value)]:
            column = f"{key}_{name}" if name else key
            if isinstance(number, int | float) and column not in row:
                row[f"metric_{column}"] = number
    return row


def collect_records(paths: Files) -> pd.DataFrame:
    """One row per record, with its path (files written beside it, such as SR3 samples)."""
    paths = sorted(map(str, paths))
    return pd.DataFrame([{**flatten(json.loads(Path(p).read_text())), "record": p} for p in paths])


def collect_sensitivity(tables: Files, assignments: Files) -> pd.DataFrame:
    """Sensitivity tables with the bits each bit list assigned (model, task from the paths)."""
    specs: dict[tuple[str, str], list[dict]] = {}
    for path in map(Path, assignments):
        key = (path.parents[3].name, path.parents[2].name)
        specs.setdefault(key, []).append(json.loads(path.read_text()))
    frames = []
    for path in map(Path, tables):
        model, task = path.parents[2].name, path.parents[1].name
        found = {bits_label(s["bits"]): s for s in specs.get((model, task), [])}
        order = bit_order(found)
        frame = pd.read_csv(path).assign(model=model, bit_lists=" / ".join(order))
        targets = zip(frame["name"], frame["layer"], strict=True)
        frame["bits"] = [
            " / ".join(str(_assigned(found[b], n, i)) for b in order) for n, i in targets
        ]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _assigned(spec: dict, name: str, layer: int) -> int:
    """The bits an assignment gives one pruned target (a layer, or a module of one)."""
    return spec["module_bits"][name] if "module_bits" in spec else spec["layer_bits"][str(layer)]


def joined(values: Iterable[str]) -> str:
    """The distinct values in order of appearance, as "a, b"."""
    return ", ".join(dict.fromkeys(values))


def ours_note(runs: pd.DataFrame, ours: str, unit: str, standin: str, *after: str) -> str:
    """What our numbers are: `ours`, then what CPU `unit`s and stand-in data mean where used."""
    cpu = f"A {unit} is a CPU process (gloo), not an accelerator."
    said = {cpu: runs["device"].eq("cpu").any(), standin: runs["data"].eq("stand-in").any()}
    return " ".join([ours, *(text for text, used in said.items() if used), *after])


def load_published() -> pd.DataFrame:
    return pd.read_csv(RESOURCES / "published.csv", dtype={"split": str})
