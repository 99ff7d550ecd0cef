"""One split of a task, from the Hugging Face Hub, a local file, or the offline stand-in, checked
and cached as JSON Lines under results/, so evaluation jobs never touch the network."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from accelstudy.data.values import NORMALISE, BadValue
from accelstudy.errors import StudyError
from accelstudy.files import atomic_open
from accelstudy.tasks import TASKS

log = logging.getLogger("accelstudy")


class DataSourceError(StudyError, ValueError):
    """A dataset that is missing, unreadable, lacks the task's columns, or has bad values."""


def _read_local(path: Path) -> list[dict[str, Any]]:
    import pandas as pd

    if not path.is_file():
        raise DataSourceError(f"data file '{path}' does not exist")
    # values as typed (no dtype guessing: "7" stays a string, an empty CSV cell is None), so
    # the value checks (data/values.py) see what the file says
    as_typed = {"dtype": False, "convert_dates": False}
    readers = {
        ".jsonl": lambda p: pd.read_json(p, lines=True, **as_typed),
        ".json": lambda p: pd.read_json(p, **as_typed),
        ".parquet": pd.read_parquet,
        ".csv": lambda p: pd.read_csv(
            p, dtype=str, keep_default_na=False, na_values=[""], skip_blank_lines=False
        ),
    }
    if path.suffix not in readers:
        raise DataSourceError(f"data file '{path}': unsupported suffix; use {sorted(readers)}")
    try:
        frame = readers[path.suffix](path)
    except ValueError as exc:
        raise DataSourceError(f"data file '{path}' could not be read: {exc}") from exc
    return json.loads(frame.to_json(orient="records"))


def read_hub(spec: dict[str, Any], split: str) -> list[dict]:
    """A split of the Hub dataset a config entry names (dataset, name, revision)."""
    from datasets import load_dataset

    name, revision = spec.get("name"), spec.get("revision")
    return [
        dict(row) for row in load_dataset(spec["dataset"], name, split=split, revision=revision)
    ]


def checked(task: str, rows: list[dict[str, Any]], origin: str) -> list[dict]:
    """The rows, given they hold the task's columns, every value checked (data/values.py) and
    normalised: labels as int, answers as bool."""
    if not rows:
        raise DataSourceError(f"{origin}: no rows")
    columns = TASKS[task].columns
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise DataSourceError(
            f"{origin}: missing column(s) {missing} for task '{task}'; "
            f"expected columns {list(columns)}, found {sorted(rows[0])}"
        )
    out = []
    for number, row in enumerate(rows, start=1):
        try:
            out.append(NORMALISE[task](row))
        except BadValue as exc:
            raise DataSourceError(f"{origin} row {number}: {exc}") from None
        except KeyError as exc:
            raise DataSourceError(f"{origin} row {number}: column {exc} is missing") from None
    return out


def load_split(task: str, spec: dict[str, Any], split: str, base_dir: Path | None = None) -> list:
    """Rows of `split` for `task` as the config entry `spec` describes."""
    source = spec["source"]
    if source == "standin":
        from accelstudy.data.standin import standin_rows

        rows, origin = standin_rows(task, split), f"stand-in {task}/{split}"
    elif source == "local":
        files = spec.get("files") or {}
        if split not in files:
            raise DataSourceError(f"config key 'tasks.{task}.files.{split}': no file given")
        path = (base_dir or Path.cwd()) / files[split]
        rows, origin = _read_local(path), f"data file '{files[split]}'"
    elif source == "hf":
        rows = read_hub(spec, split)
        origin = f"dataset '{spec['dataset']}' split '{split}'"
    else:
        raise DataSourceError(f"config key 'tasks.{task}.source': unknown source '{source}'")
    return checked(task, rows, origin)


def write_jsonl(rows: list[dict[str, Any]], out: str | Path) -> int:
    """Cache rows as JSON Lines at `out` (atomically); return the row count."""
    with atomic_open(out) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)


def prepare_data(task: str, spec: dict[str, Any], split: str, out: str | Path) -> int:
    """The `prepare-data` stage: one split of a task from its source, cached as JSON Lines at
    `out`; returns the row count."""
    rows = write_jsonl(load_split(task, spec, split), out)
    log.info("prepared %d rows of %s/%s -> %s", rows, task, split, out)
    return rows


def read_prepared(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]
