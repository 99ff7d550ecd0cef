"""A task is one entry of accelstudy.tasks: an ARC-Easy-shaped task (a question and 3 to 5
labelled choices, tests/arc_task.py: its rows' check, stand-in and prompts) registered alone is a
config key with its own paper-protocol length, prepares from a local file, evaluates under both
protocols, quantizes and evaluates, and reaches the report's tables; from a plugin, Snakemake's
jobs see it too (`install_plugin`, tests/test_resume.py's study)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from tests.arc_task import ARC, ROWS


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


def test_the_task_quantizes_and_reaches_the_reports_tables(arc_registered, tmp_path):
    """Quantized (an assignment of its own) and evaluated, in this process; with the baselines
    of both protocols, in Table 1 and the baseline table. Through Snakemake's jobs, from a
    plugin: tests/test_resume.py's study."""
    from accelstudy.data.sources import prepare_data
    from accelstudy.evaluate.baseline import baseline
    from accelstudy.models import save_prepared, tiny_random_llama
    from accelstudy.options import default
    from accelstudy.ptq.quantize import quantize
    from accelstudy.report.collect import collect_records
    from accelstudy.report.quantization import baseline_table, load_published, table1
    from accelstudy.tasks import relevant_settings

    file, data = tmp_path / "arc.jsonl", tmp_path / "test.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    prepare_data("arc_easy", {"source": "local", "files": {"test": str(file)}}, "test", data)
    save_prepared(*tiny_random_llama(layers=2), tmp_path / "model")
    flags = {"study": "t", "system": "cpu", "model_name": "tiny", "model_dir": tmp_path / "model"}
    flags |= {"task": "arc_easy", "data": data, "data_source": "local", "limit": None}
    evaluation = default("evaluation") | {"dtype": "float32"}  # arc_easy_max_length among them
    for protocol in ("paper", "lm-eval"):
        run = {"settings": relevant_settings("arc_easy", protocol, evaluation)}
        run |= {"out": tmp_path / f"{protocol}.json", "items": tmp_path / f"{protocol}.parquet"}
        baseline(protocol=protocol, **flags, **run)
        assert pd.read_parquet(run["items"])["gold"].tolist() == [1, 0, 4]
    assignment = tmp_path / "assignment.json"
    assignment.write_text(json.dumps({"bits": [8, 4], "method": "x", "layer_bits": {0: 8, 1: 4}}))
    quantized = {"recipe": "fake", "assignment": assignment, "out": tmp_path / "q.json"}
    quantized["items"] = tmp_path / "q.parquet"
    settings = relevant_settings("arc_easy", "paper", evaluation)
    assert 0 <= quantize(**flags, settings=settings, **quantized)["metrics"]["accuracy"] <= 1
    frame = collect_records([tmp_path / "paper.json", tmp_path / "lm-eval.json", quantized["out"]])
    assert set(baseline_table(frame, load_published())["task"]) == {"arc_easy"}
    assert "arc_easy" in set(table1(frame, ["[8,4]"])["task"])


PLUGIN = """from accelstudy.tasks import TASKS
from tests.arc_task import ARC

TASKS[ARC.name] = ARC
"""


def install_plugin(tmp_path, monkeypatch) -> Path:
    """ARC as an installed distribution's `accelstudy.plugins` entry point, on the PYTHONPATH of
    every process started from here (Snakemake, its jobs); its local test file."""
    from tests.conftest import ROOT

    site = tmp_path / "site"
    (site / "arc_plugin-0.dist-info").mkdir(parents=True)
    (site / "arc_plugin.py").write_text(PLUGIN)
    (site / "arc_plugin-0.dist-info" / "METADATA").write_text("Name: arc-plugin\nVersion: 0\n")
    entry = "[accelstudy.plugins]\narc = arc_plugin\n"
    (site / "arc_plugin-0.dist-info" / "entry_points.txt").write_text(entry)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))
    file = tmp_path / "arc.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return file
