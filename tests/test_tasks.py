"""A task is one entry of accelstudy.tasks: an ARC-Easy-shaped task (a question and 3 to 5
labelled choices) registered here alone, with its rows' check, stand-in and prompts below, is a
config key with its own paper-protocol length, prepares from a local file, evaluates under both
protocols, quantizes and evaluates, and reaches the report's tables."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from accelstudy.evaluate.prompts import ChoiceRequest
from accelstudy.tasks import ACCURACY, FIRST_INDEX, ChoiceProtocol, TaskSpec

HERE = "tests.test_tasks"
ARC = TaskSpec("arc_easy", "multiple-choice", "allenai/ai2_arc", "ARC-Easy", "test", "train",
               ("question", "choices", "answerKey"), ACCURACY, f"{HERE}:arc_row",
               f"{HERE}:arc_standin", max_length=256, protocols={
    "paper": ChoiceProtocol(f"{HERE}:arc_request", "paper", "token", "right", FIRST_INDEX),
    "lm-eval": ChoiceProtocol(f"{HERE}:arc_request", "lm-eval", "none", "left", FIRST_INDEX,
                              "acc_norm")})  # fmt: skip
ROWS = [
    {"question": "Which is a liquid at room temperature?",
     "choices": {"text": ["iron", "water", "salt"], "label": ["A", "B", "C"]}, "answerKey": "B"},
    {"question": "What do plants need to make food?",
     "choices": {"text": ["sunlight", "sand", "noise", "plastic"],
                 "label": ["A", "B", "C", "D"]}, "answerKey": "A"},
    {"question": "Which animal lays eggs?",
     "choices": {"text": ["cow", "dog", "horse", "cat", "hen"],
                 "label": ["1", "2", "3", "4", "5"]}, "answerKey": "5"},
]  # fmt: skip


def arc_row(row: dict) -> dict:
    """ARC's row as is, checked: its answer key is one of its choices' labels."""
    from accelstudy.data.sources import BadValue

    if row["answerKey"] not in row["choices"]["label"]:
        raise BadValue("answerKey", row["answerKey"], "is not one of the choices' labels")
    return row


def arc_standin(split: str) -> list[dict]:
    return [dict(row, question=f"{row['question']} ({split})") for row in ROWS]


def arc_request(row: dict) -> ChoiceRequest:
    """lm-eval's arc_easy: 'Question: {question}\\nAnswer:', each choice's text."""
    gold = row["choices"]["label"].index(row["answerKey"])
    return ChoiceRequest(f"Question: {row['question']}\nAnswer:", row["choices"]["text"], gold)


@pytest.fixture
def arc_registered(monkeypatch):
    from accelstudy import options, tasks

    monkeypatch.setitem(tasks.TASKS, ARC.name, ARC)
    options._schema.cache_clear()
    yield
    monkeypatch.undo()
    options._schema.cache_clear()


def test_a_task_registered_alone_runs_through_every_stage(arc_registered, tmp_path):
    from accelstudy.config import validate_config
    from accelstudy.data.sources import DataSourceError, prepare_data
    from accelstudy.evaluate.baseline import baseline
    from accelstudy.models import save_prepared, tiny_random_llama
    from accelstudy.ptq.quantize import quantize
    from accelstudy.report.collect import collect_records
    from accelstudy.report.quantization import baseline_table, load_published, table1
    from accelstudy.tasks import relevant_settings

    from tests.conftest import TINY_CONFIG

    file = tmp_path / "arc.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    config = json.loads(json.dumps(TINY_CONFIG))
    config["tasks"] = {"arc_easy": {"source": "local", "files": {"test": str(file)}}}
    config["ptq"]["tasks"] = ["arc_easy"]
    evaluation = validate_config(config)["evaluation"]
    assert evaluation["arc_easy_max_length"] == 256  # the spec's default, a config key
    settings = relevant_settings("arc_easy", "paper", evaluation | {"dtype": "float32"})
    assert settings == {"arc_easy_max_length": 256, "dtype": "float32"}

    data = tmp_path / "test.jsonl"
    prepare_data("arc_easy", {"source": "local", "files": {"test": str(file)}}, "test", data)
    prepare_data("arc_easy", {"source": "standin"}, "test", tmp_path / "standin.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(dict(ROWS[0], answerKey="Z")) + "\n")
    with pytest.raises(DataSourceError, match="row 1: column 'answerKey' value 'Z'"):
        prepare_data("arc_easy", {"source": "local", "files": {"test": str(bad)}}, "test", data)

    save_prepared(*tiny_random_llama(layers=2), tmp_path / "model")
    flags = {"study": "t", "system": "cpu", "model_name": "tiny", "model_dir": tmp_path / "model"}
    flags |= {"task": "arc_easy", "data": data, "data_source": "local", "limit": None}
    records = []
    for protocol in ("paper", "lm-eval"):
        run = {"settings": relevant_settings("arc_easy", protocol, evaluation)}
        run |= {"out": tmp_path / f"{protocol}.json", "items": tmp_path / f"{protocol}.parquet"}
        records.append(baseline(protocol=protocol, **flags, **run))
        assert pd.read_parquet(run["items"])["gold"].tolist() == [1, 0, 4]
    assert 0 <= records[0]["metrics"]["accuracy"] <= 1
    assert "acc_norm" in records[1]["metrics"]  # lm-eval's sum scoring reports both
    assignment = tmp_path / "assignment.json"
    assignment.write_text(json.dumps({"bits": [8, 4], "method": "x", "layer_bits": {0: 8, 1: 4}}))
    quantized = {"recipe": "fake", "assignment": assignment, "out": tmp_path / "q.json"}
    quantized["items"] = tmp_path / "q.parquet"
    settings = relevant_settings("arc_easy", "paper", evaluation)
    records.append(quantize(**flags, settings=settings, **quantized))

    frame = collect_records([tmp_path / "paper.json", tmp_path / "lm-eval.json", quantized["out"]])
    assert set(baseline_table(frame, load_published())["task"]) == {"arc_easy"}
    assert "arc_easy" in set(table1(frame, ["[8,4]"])["task"])
