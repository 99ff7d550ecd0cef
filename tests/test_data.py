"""Stand-ins have their task's schema and sensible content; local files and columns are checked."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from accelstudy.data.sources import (
    STANDIN,
    DataSourceError,
    load_split,
    prepare_data,
    read_prepared,
    read_source,
)
from accelstudy.data.standin import corpus_paragraphs, standin_rows
from accelstudy.tasks import SPLITS, TASKS


@pytest.mark.parametrize("task", sorted(TASKS))
def test_standin_has_task_schema(task, standin):
    rows = standin[task]
    assert len(rows) > 50
    for column in TASKS[task].columns:
        assert column in rows[0]


def test_standin_splits_are_disjoint():
    texts = {s: {p for _, p in corpus_paragraphs(s)} for s in SPLITS}
    assert not texts["train"] & texts["test"]
    assert not texts["train"] & texts["validation"]
    assert not texts["validation"] & texts["test"]


def test_standin_is_deterministic():
    assert standin_rows("hellaswag", "validation") == standin_rows("hellaswag", "validation")


def test_hellaswag_standin_true_ending_continues_its_context(standin):
    paragraphs = [p for _, p in corpus_paragraphs("validation")]
    for row in standin["hellaswag"][:30]:
        assert len(row["endings"]) == 4 and len(set(row["endings"])) == 4
        label = int(row["label"])
        true_text = (
            f"{row['ctx_a']} {row['ctx_b'][0].upper()}{row['ctx_b'][1:]} {row['endings'][label]}"
        )
        assert any(true_text in p for p in paragraphs)


def test_boolq_standin_answers_are_balanced(standin):
    answers = [row["answer"] for row in standin["boolq"]]
    assert abs(sum(answers) - len(answers) / 2) <= 1
    for row in standin["boolq"]:
        assert isinstance(row["answer"], bool)


def test_wikitext_standin_looks_like_wikitext(standin):
    rows = standin["wikitext"]
    assert rows[0]["text"] == "" and rows[2]["text"] == ""  # blank lines, as HF stores them
    assert rows[1]["text"].startswith(" = ") and rows[1]["text"].endswith(" = \n")
    assert sum(len(r["text"]) for r in rows) > 40_000


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_local_files_in_each_format(tmp_path, suffix):
    frame = pd.DataFrame(
        {"question": ["is it", "is not"], "answer": [True, False], "passage": ["a", "b"]}
    )
    path = tmp_path / f"boolq{suffix}"
    {
        ".jsonl": lambda p: frame.to_json(p, orient="records", lines=True),
        ".csv": lambda p: frame.to_csv(p, index=False),
        ".parquet": lambda p: frame.to_parquet(p),
    }[suffix](path)
    rows = load_split(
        "boolq", {"source": "local", "files": {"validation": str(path)}}, "validation"
    )
    assert [r["answer"] for r in rows] == [True, False]


def test_dataset_without_expected_columns_names_them(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q", "label": 1, "text": "p"}) + "\n")
    with pytest.raises(DataSourceError) as error:
        load_split("boolq", {"source": "local", "files": {"validation": str(path)}}, "validation")
    assert "missing column(s) ['answer', 'passage']" in str(error.value)
    assert "\n" not in str(error.value)


def test_prepare_data_round_trips_and_never_leaves_partial_output(tmp_path):
    out = tmp_path / "data" / "boolq" / "validation.jsonl"
    n = prepare_data("boolq", {"source": "standin"}, "validation", out)
    assert len(read_prepared(out)) == n
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"x": 1}\n')
    target = tmp_path / "data" / "boolq" / "train.jsonl"
    with pytest.raises(DataSourceError):
        prepare_data("boolq", {"source": "local", "files": {"train": str(bad)}}, "train", target)
    assert not target.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "validation.jsonl",
        "validation.source.json",
    ]
    assert read_source(out)["generator"] == STANDIN and read_source(out)["source"] == "standin"


def test_a_local_file_is_named_by_its_digest(tmp_path, monkeypatch):
    """What `compare` matches on: the sha256 of the file the study read, not its name."""
    import hashlib

    monkeypatch.chdir(tmp_path)
    Path("boolq.jsonl").write_text(json.dumps(BOOLQ_ROW) + "\n")
    spec = {"source": "local", "files": {"train": "boolq.jsonl"}}
    prepare_data("boolq", spec, "train", tmp_path / "out" / "train.jsonl")
    described = read_source(tmp_path / "out" / "train.jsonl")
    digest = hashlib.sha256(Path("boolq.jsonl").read_bytes()).hexdigest()
    assert described["source"] == "local" and described["digest"] == f"sha256:{digest}"


HELLASWAG_ROW = {
    "activity_label": "a",
    "ctx_a": "x",
    "ctx_b": "y",
    "endings": ["e1", "e2", "e3", "e4"],
    "label": "2",
}
BOOLQ_ROW = {"question": "q", "passage": "p", "answer": True}


def _write(tmp_path, task: str, rows: list[dict]) -> dict:
    path = tmp_path / f"{task}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"source": "local", "files": {"validation": str(path)}}


@pytest.mark.parametrize(
    ("task", "column", "value", "requirement"),
    [
        ("hellaswag", "label", "7", "from 0 to 3"),
        ("hellaswag", "label", "two", "from 0 to 3"),
        ("hellaswag", "label", 1.5, "from 0 to 3"),
        ("hellaswag", "endings", ["e1", ""], "list of non-empty strings"),
        ("hellaswag", "endings", "e1 e2", "list of non-empty strings"),
        ("hellaswag", "ctx_a", " ", "non-empty string"),
        ("boolq", "answer", "maybe", '"true"/"false"'),
        ("boolq", "answer", "no", '"true"/"false"'),
        ("boolq", "answer", 2, '"true"/"false"'),
        ("boolq", "question", "", "non-empty string"),
        ("boolq", "passage", None, "non-empty string"),
        ("wikitext", "text", 42, "is not a string"),
    ],
)
def test_bad_values_stop_with_file_row_column_value(tmp_path, task, column, value, requirement):
    good = {"hellaswag": HELLASWAG_ROW, "boolq": BOOLQ_ROW, "wikitext": {"text": " a \n"}}[task]
    spec = _write(tmp_path, task, [good, good, {**good, column: value}])
    with pytest.raises(DataSourceError) as error:
        load_split(task, spec, "validation")
    message = str(error.value)
    assert message.startswith(f"data file '{tmp_path / task}.jsonl' row 3: column '{column}' ")
    assert repr(value) in message and requirement in message and "\n" not in message


def test_values_are_normalised(tmp_path):
    answers = [True, False, 1, 0, "TRUE", "false", " True "]
    rows = load_split(
        "boolq",
        _write(tmp_path, "boolq", [{**BOOLQ_ROW, "answer": a} for a in answers]),
        "validation",
    )
    assert [r["answer"] for r in rows] == [True, False, True, False, True, False, True]
    labels = load_split(
        "hellaswag",
        _write(tmp_path, "hellaswag", [HELLASWAG_ROW, {**HELLASWAG_ROW, "label": 0}]),
        "validation",
    )
    assert [r["label"] for r in labels] == [2, 0]


def test_empty_csv_cell_is_an_empty_wikitext_line(tmp_path):
    path = tmp_path / "wiki.csv"
    path.write_text('text\n" = A = \n"\n\n" a line \n"\n')
    rows = load_split("wikitext", {"source": "local", "files": {"test": str(path)}}, "test")
    assert rows == [{"text": " = A = \n"}, {"text": ""}, {"text": " a line \n"}]
