"""One split of a task, from the Hugging Face Hub, a local file, or the offline stand-in, checked
and cached as JSON Lines under results/, so evaluation jobs never touch the network. A bad value
(a HellaSwag label that indexes no ending, a BoolQ answer of "maybe") would become a quiet wrong
number: it stops `prepare-data` with one line naming file, row, column and value."""

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelstudy import timeline
from accelstudy.errors import StudyError
from accelstudy.files import atomic_open, sha256_file, write_json
from accelstudy.layout import beside
from accelstudy.snapshots import hub_commit
from accelstudy.tasks import TASKS, named

log = logging.getLogger("accelstudy")
Row = dict[str, Any]


class DataSourceError(StudyError, ValueError):
    """A dataset that is missing, unreadable, lacks the task's columns, or has bad values."""


STANDIN = "accelstudy stand-in 1"  # bump when a stand-in generator's output changes
BOOLQ_ANSWERS = {"true": True, "false": False, "1": True, "0": False}


class BadValue(ValueError):
    """A value that the task cannot use: its column, the value, and what it must be."""

    def __init__(self, column: str, value: Any, requirement: str) -> None:
        super().__init__(f"column '{column}' value {value!r} {requirement}")


def boolq_answer(value: Any) -> bool:
    """A boolean, 0/1, or "true"/"false" in any case, mapped explicitly (never truthiness)."""
    if isinstance(value, int | float) and value in (0, 1):  # bool is an int
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in BOOLQ_ANSWERS:
        return BOOLQ_ANSWERS[value.strip().lower()]
    raise BadValue("answer", value, 'is not a boolean, 0/1, or "true"/"false"')


def _text(row: Row, column: str, allow_empty: bool = False) -> str:
    value = row[column]
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise BadValue(column, value, f"is not a {'string' if allow_empty else 'non-empty string'}")
    return value


def wikitext_row(row: Row) -> Row:
    # an empty CSV cell is read as None: it was the empty line WikiText stores as ""
    return {**row, "text": "" if row["text"] is None else _text(row, "text", allow_empty=True)}


def hellaswag_row(row: Row) -> Row:
    out = {**row, **{c: _text(row, c) for c in ("activity_label", "ctx_a")}}
    out["ctx_b"] = _text(row, "ctx_b", allow_empty=True)
    if row.get("ctx") is not None:
        out["ctx"] = _text(row, "ctx")
    endings, label = row["endings"], row["label"]
    non_empty = isinstance(endings, list) and all(isinstance(e, str) and e.strip() for e in endings)
    if not (endings and non_empty):
        raise BadValue("endings", endings, "is not a list of non-empty strings")
    index = int(label) if isinstance(label, str) and label.strip().isdigit() else label
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(endings):
        requirement = f"is not an integer (or string of digits) from 0 to {len(endings) - 1}"
        raise BadValue("label", label, requirement)
    return {**out, "endings": endings, "label": index}


def boolq_row(row: Row) -> Row:
    out = {**row, "question": _text(row, "question"), "passage": _text(row, "passage")}
    return {**out, "answer": boolq_answer(row["answer"])}


def file_problem(path: Path, name: str | Path) -> str | None:
    """What stops a local file's reader, by line and with the fix (None: none; a missing file is
    named by its own check): no rows, a byte-order mark or bytes that are not UTF-8 in JSON, a
    line that is not a JSON object."""
    empty = f"'{name}' is empty; give the split's rows"
    if not path.is_file() or path.suffix not in (".json", ".jsonl"):  # a table: read in its job
        return empty if path.is_file() and not path.stat().st_size else None
    if not (data := path.read_bytes()).strip():
        return empty
    if data.startswith(b"\xef\xbb\xbf"):
        return f"'{name}' starts with a byte-order mark the JSON reader refuses; save it without"
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        at, start = data.count(b"\n", 0, exc.start) + 1, data.rfind(b"\n", 0, exc.start)
        column = exc.start - start  # 1-based: rfind is -1 on the first line
        return f"'{name}' line {at} column {column} is not UTF-8; save the file as UTF-8"
    for number, line in enumerate(text.split("\n") if path.suffix == ".jsonl" else [text], 1):
        try:
            row = json.loads(line) if line.strip() else {}
        except json.JSONDecodeError as exc:
            at = number if path.suffix == ".jsonl" else exc.lineno
            return f"'{name}' line {at} is not valid JSON ({exc.msg}); fix or delete that line"
        if path.suffix == ".jsonl" and not isinstance(row, dict):
            return f"'{name}' line {number} is not a JSON object; one row per line, as {{...}}"
    return None


def read_local(path: Path) -> list[Row]:
    """A .jsonl, .json, .parquet or .csv file's rows, its values as typed (no dtype guessing: "7"
    stays a string, an empty CSV cell is None), so that the value checks see what it says."""
    import pandas as pd

    if not path.is_file():
        raise DataSourceError(f"data file '{path}' does not exist")
    readers: dict[str, Callable[[Path], pd.DataFrame]] = {
        ".jsonl": lambda p: pd.read_json(p, lines=True, dtype=False, convert_dates=False),
        ".json": lambda p: pd.read_json(p, dtype=False, convert_dates=False),
        ".parquet": pd.read_parquet,
        ".csv": lambda p: pd.read_csv(
            p, dtype=str, keep_default_na=False, na_values=[""], skip_blank_lines=False
        ),
    }
    if path.suffix not in readers:
        raise DataSourceError(f"data file '{path}': unsupported suffix; use {sorted(readers)}")
    if problem := file_problem(path, path):
        raise DataSourceError(f"data file {problem}")
    try:
        frame = readers[path.suffix](path)
    except ValueError as exc:
        raise DataSourceError(f"data file '{path}' could not be read: {exc}") from exc
    return json.loads(frame.to_json(orient="records"))


def read_hub(spec: dict[str, Any], split: str) -> list[Row]:
    """A split of the Hub dataset a config entry names (dataset, name, revision)."""
    from datasets import load_dataset

    where = {"split": split, "revision": spec.get("revision")}
    return [dict(row) for row in load_dataset(spec["dataset"], spec.get("name"), **where)]


def load_split(task: str, spec: dict[str, Any], split: str) -> list[Row]:
    """Rows of `split` for `task` from the source `spec` names, each checked and normalised."""
    source = spec["source"]
    if source == "standin":
        from accelstudy.data.standin import standin_rows

        rows, origin = standin_rows(task, split), f"stand-in {task}/{split}"
    elif source == "local":
        files = spec.get("files") or {}
        if split not in files:
            raise DataSourceError(f"config key 'tasks.{task}.files.{split}': no file given")
        rows, origin = read_local(Path.cwd() / files[split]), f"data file '{files[split]}'"
    elif source == "hf":
        rows, origin = read_hub(spec, split), f"dataset '{spec['dataset']}' split '{split}'"
    else:
        raise DataSourceError(f"config key 'tasks.{task}.source': unknown source '{source}'")
    if not rows:
        raise DataSourceError(f"{origin}: no rows")
    columns = TASKS[task].columns
    if missing := [c for c in columns if c not in rows[0]]:
        raise DataSourceError(
            f"{origin}: missing column(s) {missing} for task '{task}'; "
            f"expected columns {list(columns)}, found {sorted(rows[0])}"
        )
    checked, normalise = [], named(TASKS[task].rows)
    for number, row in enumerate(rows, start=1):
        try:
            checked.append(normalise(row))
        except BadValue as exc:
            raise DataSourceError(f"{origin} row {number}: {exc}") from None
        except KeyError as exc:
            raise DataSourceError(f"{origin} row {number}: column {exc} is missing") from None
    return checked


def write_jsonl(rows: list[Row], out: str | Path) -> int:
    """Cache rows as JSON Lines at `out` (atomically); return the row count."""
    with atomic_open(out) as handle:
        handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return len(rows)


def describe_source(
    spec: dict[str, Any], split: str | None, file: str | None = None, seed: int | None = None
) -> dict[str, Any]:
    """What names a dataset in records and for `compare`: Hub id, config, split and commit; the
    sha256 of a local file; or the stand-in generator and seed."""
    source = spec.get("source", "standin")
    if source == "hf":
        revision = spec.get("revision") or "main"
        commit = hub_commit(spec["dataset"], revision, "dataset")
        hub = {"dataset": spec["dataset"], "name": spec.get("name"), "split": split}
        return {"source": source, **hub, "revision": revision, "commit": commit}
    if source == "local":
        digest = f"sha256:{sha256_file(Path.cwd() / str(file))}"
        return {"source": source, "file": Path(str(file)).name, "digest": digest}  # no home dir
    generated = {"generator": STANDIN} if source == "standin" else {}  # else a PySM preset
    return {"source": source, **generated, "seed": seed}


def source_file(data: str | Path) -> Path:
    """Where a prepare stage describes the source of what it wrote at `data`."""
    return Path(beside(data, "source"))


def read_source(data: str | Path) -> dict[str, Any]:
    """The source a prepare stage described for `data` (else it is a local file), and its sha256."""
    prepared, described = f"sha256:{sha256_file(data)}", source_file(data)
    if not described.is_file():
        return {"source": "local", "digest": prepared, "prepared": prepared}
    return {**json.loads(described.read_text()), "prepared": prepared}


def prepare_data(task: str, spec: dict[str, Any], split: str, out: str | Path) -> int:
    """One split of a task cached as JSON Lines at `out`, its source described beside it."""
    rows = write_jsonl(load_split(task, spec, split), out)
    write_json(source_file(out), describe_source(spec, split, (spec.get("files") or {}).get(split)))
    log.info("prepared %d rows of %s/%s -> %s", rows, task, split, out)
    return rows


def read_prepared(path: str | Path) -> list[Row]:
    with timeline.phase("data"), open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]
