"""Each task's values checked and normalised when a split is prepared: a bad value (a HellaSwag
label that indexes no ending, a BoolQ answer of "maybe") would otherwise become a quiet wrong
number; here it stops `prepare-data` with one line naming file, row, column and value."""

from __future__ import annotations

from typing import Any

BOOLQ_ANSWERS = {"true": True, "false": False, "1": True, "0": False}


class BadValue(ValueError):
    """A value that the task cannot use: its column, the value, and what it must be."""

    def __init__(self, column: str, value: Any, requirement: str) -> None:
        super().__init__(f"column '{column}' value {value!r} {requirement}")


def boolq_answer(value: Any, column: str = "answer") -> bool:
    """A boolean, 0/1, or "true"/"false" in any case, mapped explicitly (never truthiness)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in BOOLQ_ANSWERS:
        return BOOLQ_ANSWERS[value.strip().lower()]
    raise BadValue(column, value, 'is not a boolean, 0/1, or "true"/"false"')


def _text(row: dict, column: str, allow_empty: bool = False) -> str:
    value = row[column]
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        kind = "string" if allow_empty else "non-empty string"
        raise BadValue(column, value, f"is not a {kind}")
    return value


def _endings(row: dict) -> list[str]:
    value = row["endings"]
    if not (
        isinstance(value, list) and value and all(isinstance(e, str) and e.strip() for e in value)
    ):
        raise BadValue("endings", value, "is not a list of non-empty strings")
    return value


def _label(row: dict, n_endings: int) -> int:
    value = row["label"]
    index = int(value) if isinstance(value, str) and value.strip().isdigit() else value
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_endings:
        raise BadValue(
            "label", value, f"is not an integer (or string of digits) from 0 to {n_endings - 1}"
        )
    return index


def _wikitext(row: dict) -> dict:
    # an empty CSV cell is read as None: it was the empty line WikiText stores as ""
    return {**row, "text": "" if row["text"] is None else _text(row, "text", allow_empty=True)}


def _hellaswag(row: dict) -> dict:
    out = {**row, **{c: _text(row, c) for c in ("activity_label", "ctx_a")}}
    out["ctx_b"] = _text(row, "ctx_b", allow_empty=True)
    if row.get("ctx") is not None:
        out["ctx"] = _text(row, "ctx")
    out["endings"] = _endings(row)
    out["label"] = _label(row, len(out["endings"]))
    return out


def _boolq(row: dict) -> dict:
    out = {**row, "question": _text(row, "question"), "passage": _text(row, "passage")}
    return {**out, "answer": boolq_answer(row["answer"])}


NORMALISE = {"wikitext": _wikitext, "hellaswag": _hellaswag, "boolq": _boolq}
