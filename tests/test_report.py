"""The report: tables beside the published numbers, figures, HTML and Markdown."""

from __future__ import annotations

import pandas as pd
from accelstudy.records import provenance, write_record
from accelstudy.report import build_report, load_published


def _record(task: str, protocol: str, metric: str, value: float) -> dict:
    return {
        "stage": "baseline", "study": "t", "system": "cpu", "device": "cpu", "model": "m",
        "task": task, "method": "fp32", "protocol": protocol, "data_source": "standin",
        "parameters": {},
        "metrics": {metric: value, "primary_metric": metric, "wall_time_s": 2.0,
                    "tokens_per_s": 100.0, "peak_memory_bytes": 2**30},
        "provenance": provenance("h", "cpu", "cpu", 2.0),
    }  # fmt: skip


def test_published_numbers_from_the_paper():
    published = load_published()
    fp32 = published[(published["table"] == "baseline") & (published["split"] == "test")]
    assert fp32["value"].tolist() == [12.02]
    ratios = published[published["table"] == "compression"]["value"].tolist()
    assert ratios[:3] == [3.472, 4.797, 5.928]


def test_report_puts_ours_beside_published(tmp_path):
    paths = []
    for task, protocol, metric, value in [
        ("wikitext", "paper", "perplexity", 19.5),
        ("boolq", "paper", "accuracy", 0.625),
        ("hellaswag", "lm-eval", "accuracy", 0.4),
    ]:
        path = tmp_path / "records" / f"{task}-{protocol}.json"
        write_record(path, _record(task, protocol, metric, value))
        paths.append(path)
    index = build_report("t", paths, tmp_path / "results")
    assert index.is_file()
    records = pd.read_csv(tmp_path / "results" / "tables" / "records.csv")
    assert len(records) == 3 and set(records["data"]) == {"stand-in"}
    assert (
        pd.read_parquet(tmp_path / "results" / "tables" / "records.parquet").shape == records.shape
    )
    table = pd.read_csv(tmp_path / "results" / "tables" / "baseline.csv")
    boolq = table[table["task"] == "boolq"].iloc[0]
    assert boolq["ours"] == 62.5
    assert "57.89 (Gaudi2" in boolq["published TinyLlama-1.1B FP32"]
    hella = table[table["task"] == "hellaswag"].iloc[0]
    assert "59.2 (model card" in hella["published TinyLlama-1.1B FP32"]
    wiki = table[table["task"] == "wikitext"].iloc[0]
    assert wiki["ours"] == 19.5 and "12.02" in wiki["published TinyLlama-1.1B FP32"]
    markdown = (tmp_path / "results" / "report" / "report.md").read_text()
    assert "stand-in" in markdown and "| boolq" in markdown
    assert (tmp_path / "results" / "report" / "figures" / "baseline.png").stat().st_size > 10_000
    assert "<table" in index.read_text()
