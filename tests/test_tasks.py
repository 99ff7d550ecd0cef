"""A task is one entry of accelstudy.tasks: an ARC-Easy-shaped task (a question and 3 to 5
labelled choices) registered here alone, with its rows' check, stand-in and prompts below, is a
config key with its own paper-protocol length, prepares from a local file, evaluates under both
protocols, quantizes and evaluates, and reaches the report's tables."""

from __future__ import annotations

import json
import os

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
    options._schema_of.cache_clear()
    yield
    monkeypatch.undo()
    options._schema_of.cache_clear()


def test_a_task_registered_alone_is_a_config_key_and_prepares(arc_registered, tmp_path):
    """Its paper-protocol length is a config key; its rows come from a local file or its
    stand-in, each row checked by its spec (a bad one named by row, column and value)."""
    from accelstudy.config import validate_config
    from accelstudy.data.sources import DataSourceError, prepare_data
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
    assert len(pd.read_json(tmp_path / "standin.jsonl", lines=True)) == 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(dict(ROWS[0], answerKey="Z")) + "\n")
    with pytest.raises(DataSourceError, match="row 1: column 'answerKey' value 'Z'"):
        prepare_data("arc_easy", {"source": "local", "files": {"test": str(bad)}}, "test", data)


PLUGIN = """from accelstudy.tasks import TASKS
from tests.test_tasks import ARC

TASKS[ARC.name] = ARC
"""


@pytest.mark.e2e
def test_a_task_from_a_plugin_runs_through_the_tiny_study(tmp_path, monkeypatch):
    """An installed distribution's `accelstudy.plugins` entry point registers the task in every
    process (Snakemake's parse, each job): the tiny study evaluates it under both protocols,
    scans and quantizes it, and the report's tables hold it."""
    from tests.conftest import ROOT, TINY_CONFIG, snakemake

    site = tmp_path / "site"
    (site / "arc_plugin-0.dist-info").mkdir(parents=True)
    (site / "arc_plugin.py").write_text(PLUGIN)
    (site / "arc_plugin-0.dist-info" / "METADATA").write_text("Name: arc-plugin\nVersion: 0\n")
    entry = "[accelstudy.plugins]\narc = arc_plugin\n"
    (site / "arc_plugin-0.dist-info" / "entry_points.txt").write_text(entry)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))
    file = tmp_path / "arc.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    config = json.loads(json.dumps(TINY_CONFIG))
    files = {"test": str(file), "train": str(file)}
    config["tasks"] = {"arc_easy": {"source": "local", "files": files}}
    config["tasks"]["arc_easy"]["protocols"] = ["paper", "lm-eval"]
    config["ptq"] |= {"tasks": ["arc_easy"], "calibration_limit": {"arc_easy": 3}, "chunks": 1}
    config["ptq"]["bit_lists"] = [[8, 4]]
    config["finetune"]["enabled"] = config["diffusion"]["enabled"] = False  # fmt: skip
    result = snakemake(tmp_path, "--cores", "2", config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    tables = tmp_path / "results" / "tiny" / "tables"
    baseline = pd.read_csv(tables / "baseline.csv")
    shown = baseline[["task", "protocol"]].drop_duplicates().sort_values("protocol")
    assert shown.values.tolist() == [["arc_easy", "lm-eval"], ["arc_easy", "paper"]]
    table1 = pd.read_csv(tables / "table1.csv")
    assert set(table1["task"]) == {"arc_easy"}
    assert {"[8,4]", "FP16/INT8 [8,4]"} <= set(table1.columns)
