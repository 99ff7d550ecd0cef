"""Records (one JSON per job) -> one tidy table: a row per record, its metrics as columns, with
the scheduler's own figures beside the job's."""

import copy
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from accelstudy.accounting import ran_during
from accelstudy.errors import StudyError
from accelstudy.files import read_json
from accelstudy.layout import beside, misplaced
from accelstudy.strategies import states_held

SOURCE_LABELS = {"standin": "stand-in", "hf": "Hugging Face", "local": "local file"}
RECORD_KEYS = ("study", "stage", "system", "device", "model", "task", "method")
# a fine-tuning or SR3 point's parameters the tables group by, and the per-rank model-state bytes
POINT_KEYS: tuple[str, ...] = ("strategy", "attention", "cards", "devices", "repeat", "seed")
POINT_KEYS += ("max_steps", "per_device_batch", "grad_accum", "max_seq_length", "dtype")
NAN = float("nan")
# a record's rates, energies and charges: each, where present, above zero
FIGURES = {
    "metrics": ("tokens_per_s", "images_per_s", "samples_per_s"),
    "energy": ("j_per_token", "j_per_image"),
    "cost": ("units", "hours"),
}


def unusable(record: dict) -> dict[tuple[str, str], Any]:
    """The record's rates, energies and charges no table can use: zero, negative, NaN or not a
    number, or absent where the record says it measured them (its stage's rate where it ran, a
    charge where its cost is ok): a record of an older version, or edited by hand. Shown as "-"
    with a note, they take no table down."""
    found = {(part, key): value for part, keys in FIGURES.items()
             for key, value in (record.get(part) or {}).items() if key in keys}  # fmt: skip
    if record["metrics"].get("status", "ok") == "ok":
        rate = "images_per_s" if record["stage"] == "diffusion" else "tokens_per_s"
        found.setdefault(("metrics", rate), None)
    if (cost := record.get("cost") or {}).get("status") == "ok":
        found |= {("cost", key): cost.get(key) for key in FIGURES["cost"]}
    return {where: value for where, value in found.items() if not _positive(value)}


def _positive(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def flatten(record: dict) -> dict:
    """A record's table columns; numeric metrics (nested ones too) become metric_* columns; an
    unusable rate, energy or charge becomes NaN, named in `not_shown`."""
    if bad := unusable(record):
        record = copy.deepcopy(record)
        for part, key in bad:
            record[part][key] = NAN
    metrics, provenance = record["metrics"], record["provenance"]
    primary = metrics.get("primary_metric")
    rank0 = (metrics.get("model_state_bytes") or [{}])[0]
    use = record.get("utilization") or {}
    resumed = metrics.get("clean_measurement") is False  # shown, but its speed is not clean
    inputs = record.get("inputs") or {}  # none before schema version 2
    model, data = inputs.get("model") or {}, inputs.get("data") or {}
    row = {
        **{key: record[key] for key in RECORD_KEYS},
        "protocol": record.get("protocol", ""),
        "data": SOURCE_LABELS.get(record["data_source"], record["data_source"]),
        "metric": primary,
        "value": metrics.get(primary) if primary else None,
        "tokens_per_s": metrics.get("tokens_per_s", NAN),
        "peak_memory_mib": round(metrics.get("peak_memory_bytes", NAN) / 2**20, 1),
        "status": "ok-resumed" if resumed else metrics.get("status", ""),
        **{key: metrics.get(key, "") for key in ("held_out_for", "peak_memory_method")},
        **{key: record["parameters"].get(key) for key in POINT_KEYS},
        "model_states_rank0": states_held(rank0),
        "wall_time_s": metrics["wall_time_s"],
        "losses": metrics.get("losses") if record["stage"] == "finetune" else None,
        **energy_and_cost(record),
        "compute_dtype": use.get("dtype") or "",  # the dtype that computed, model TFLOP/s, MFU
        "peak_source": use.get("source", "not recorded"),
        "achieved_tflops": (use.get("achieved_flops_per_s") or NAN) / 1e12,
        "peak_tflops": (use.get("flops_per_s") or NAN) / 1e12,
        "mfu": NAN if use.get("mfu") is None else use["mfu"],
        "slurm_job": provenance.get("scheduler", {}).get("job_id", ""),
        "finished_at": provenance.get("finished_at", ""),
        **{key: provenance[key] for key in ("git_commit", "config_hash")},
        # which revisions were measured: a table compares only what names the same ones
        "model_revision": model.get("commit") or model.get("digest") or model.get("revision"),
        "data_revision": data.get("revision") or data.get("digest") or data.get("prepared"),
        "model_source": model.get("source", ""),  # "random": speed and memory only
        "device_name": provenance["hardware"].get("device_name", ""),
        "not_shown": "; ".join(f"{key} {value!r}" for (_, key), value in bad.items()),
    }
    for key, value in metrics.items():
        for name, number in value.items() if isinstance(value, dict) else [("", value)]:
            column = f"{key}_{name}" if name else key
            if isinstance(number, int | float) and column not in row:
                row[f"metric_{column}"] = number
    return row


def energy_and_cost(record: dict) -> dict:
    """Energy's status and joules per token (or image); the charged units, their unit, and the
    charge per 1M tokens (1k images) at the measured rate: units per hour over work per hour."""
    energy, cost, metrics = record.get("energy") or {}, record.get("cost") or {}, record["metrics"]
    row = {"energy": energy.get("status", "not recorded")}
    row |= {f"j_per_{unit}": energy.get(f"j_per_{unit}", NAN) for unit in ("token", "image")}
    row |= {"cost_units": cost.get("units", NAN), "cost_hours": cost.get("hours", NAN)}
    row["cost_unit"] = cost.get("unit", cost.get("status", "not recorded"))
    hourly = row["cost_units"] / row["cost_hours"] if row["cost_hours"] else NAN
    row["cost_per_mtok"] = hourly / 3600 / metrics.get("tokens_per_s", NAN) * 1e6
    row["cost_per_kimage"] = hourly / 3600 / metrics.get("images_per_s", NAN) * 1e3
    return row


def with_scheduler_figures(records: pd.DataFrame, accounted: dict[str, dict]) -> pd.DataFrame:
    """`sacct`'s elapsed seconds and joules (accounting.query) beside the in-job figures, and
    the charge over the elapsed time the scheduler saw, for a SLURM job that was one record's
    alone (a group job's time is its records' together) and that ran when the record was written."""
    jobs, written = records["slurm_job"], records["finished_at"]
    alone = jobs.map(jobs.value_counts()) == 1
    found = [
        accounted[job] if one and job in accounted and ran_during(accounted[job], at) else {}
        for job, one, at in zip(jobs, alone, written, strict=True)
    ]
    elapsed = pd.Series([f.get("elapsed_s", NAN) for f in found], index=records.index, dtype=float)
    energy = [f.get("energy_j") or NAN for f in found]
    records = records.assign(sacct_elapsed_s=elapsed, sacct_energy_j=energy)
    scaled = elapsed.notna() & (records["cost_hours"] > 0)
    per_hour = records["cost_units"] / records["cost_hours"]
    records.loc[scaled, "cost_hours"] = elapsed[scaled] / 3600
    records.loc[scaled, "cost_units"] = per_hour[scaled] * elapsed[scaled] / 3600
    return records


def collect_records(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per record, with its path (files written beside it, such as SR3 samples)."""
    rows = []
    for path in sorted(map(str, paths)):
        record = read_json(path)
        if why := misplaced(path, record):
            raise StudyError(f"{why}: delete it (its job runs again) or move it back")
        rows.append({**flatten(record), "record": path})
    return pd.DataFrame(rows)


def items_of(record: str | None) -> pd.DataFrame | None:
    """The items an evaluation record's job wrote beside it (None: a record from before)."""
    path = Path(beside(record or "-", "items"))
    return pd.read_parquet(path) if path.is_file() else None


def joined(values: Iterable[str]) -> str:
    """The distinct values in order of appearance, as "a, b"."""
    return ", ".join(dict.fromkeys(values))
