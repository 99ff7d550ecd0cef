"""The report: tables beside the published numbers, figures, HTML and Markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from accelstudy.records import provenance, write_record
from accelstudy.report import build_report, load_published
from accelstudy.report.collect import collect_records, collect_sensitivity, flatten
from accelstudy.report.figures import calibration_text
from accelstudy.report.tables import bit_order, published_table1, table1, tradeoff_points

BITS = {"[8,4,4]": (8, 4, 4), "[16,8,4]": (16, 8, 4), "[8,8,4]": (8, 8, 4)}  # not in order
SCORES = [0.9, 0.1, 0.5, -0.2]  # layer 0 most sensitive, layer 3 least


def _record(task: str, protocol: str, metric: str, value: float, stage: str = "baseline",
            method: str = "fp32", **extra: float) -> dict:  # fmt: skip
    return {
        "stage": stage, "study": "t", "system": "cpu", "device": "cpu", "model": "m",
        "task": task, "method": method, "protocol": protocol, "data_source": "standin",
        "parameters": {},
        "metrics": {metric: value, "primary_metric": metric, "wall_time_s": 2.0,
                    "tokens_per_s": 100.0, "peak_memory_bytes": 2**30, **extra},
        "provenance": provenance("h", "cpu", "cpu", 2.0),
    }  # fmt: skip


def _write(records: list[dict], folder: Path) -> list[Path]:
    paths = []
    for i, record in enumerate(records):
        paths.append(folder / "records" / f"{i:02d}.json")
        write_record(paths[-1], record)
    return paths


def synthetic_study(tmp_path: Path) -> dict:
    """Records, sensitivity tables and assignments as the rules lay them out: baselines
    under both protocols (BoolQ paper with both tie rules), and fake + nvidia quantized
    records for WikiText and BoolQ, the bit lists written out of the paper's order."""
    results = tmp_path / "results"
    records = [
        _record("wikitext", "paper", "perplexity", 19.5),
        _record("wikitext", "lm-eval", "perplexity", 31.25, word_perplexity=31.25,
                byte_perplexity=1.9, bits_per_byte=0.93),
        _record("boolq", "paper", "accuracy", 0.625, acc_ties_no=0.625, acc_ties_yes=0.6875),
        _record("boolq", "lm-eval", "accuracy", 0.55),
        _record("hellaswag", "lm-eval", "accuracy", 0.4),
    ]  # fmt: skip
    for task, metric, base in [("wikitext", "perplexity", 19.5), ("boolq", "accuracy", 0.625)]:
        for i, (label, bits) in enumerate(BITS.items()):
            for recipe, shift in [("fake", 0.01), ("nvidia", 0.02)]:
                value = base + shift * (i + 1)
                ties = (
                    {"acc_ties_no": value, "acc_ties_yes": value + 0.05} if task == "boolq" else {}
                )
                records.append(_record(task, "paper", metric, value, "quantized",
                                       f"{recipe} {label}", compression_ratio=32 / sum(bits) * 3,
                                       **ties))  # fmt: skip
        folder = results / "ptq" / "m" / task
        folder.joinpath("sensitivity").mkdir(parents=True)
        pd.DataFrame(
            {"task": task, "name": [f"layer-{i:02d}" for i in range(4)], "layer": range(4),
             "score": SCORES, "base": base, "metric_kind": metric}
        ).to_csv(folder / "sensitivity" / "layer.csv", index=False)  # fmt: skip
        for bits in BITS.values():
            spec = {"bits": list(bits), "layer_bits": {"0": bits[0], "1": bits[1], "2": bits[1],
                                                       "3": bits[2]}}  # fmt: skip
            path = folder / "layer" / f"bits-{'-'.join(map(str, bits))}" / "assignment.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(spec))
    return {
        "record_paths": _write(records, tmp_path),
        "results_dir": results,
        "sensitivity": sorted(results.glob("ptq/m/*/sensitivity/layer.csv")),
        "assignments": sorted(results.glob("ptq/m/*/layer/bits-*/assignment.json")),
        "calibration": {"wikitext": 4, "boolq": 16},
        "bit_lists": [list(b) for b in BITS.values()],
    }


@pytest.fixture()
def study(tmp_path):
    inputs = synthetic_study(tmp_path)
    index = build_report("t", **inputs)
    return inputs, index


def test_published_numbers_from_the_paper():
    published = load_published()
    fp32 = published[(published["table"] == "baseline") & (published["split"] == "test")]
    assert fp32["value"].tolist() == [12.02]
    ratios = published[published["table"] == "compression"]["value"].tolist()
    assert ratios[:3] == [3.472, 4.797, 5.928]


def test_bit_lists_in_the_papers_order_then_the_configured_order():
    assert bit_order(["[8,4,4]", "[8,2]", "[16,8,4]", "[4,4]", "[8,8,4]"]) == [
        "[16,8,4]", "[8,8,4]", "[8,4,4]", "[8,2]", "[4,4]",
    ]  # fmt: skip


def test_table1_rows_per_task_and_metric_columns_in_the_papers_order(study):
    inputs, _ = study
    table = pd.read_csv(inputs["results_dir"] / "tables" / "table1.csv")
    assert list(table.columns) == [
        "model", "data", "task", "metric", "FP32", "[16,8,4]", "[8,8,4]", "[8,4,4]",
        "FP16/INT8 [16,8,4]", "FP16/INT8 [8,8,4]", "FP16/INT8 [8,4,4]",
    ]  # fmt: skip
    rows = table.set_index(["task", "metric"])
    assert list(rows.index) == [
        ("boolq", "accuracy % (ties no)"), ("boolq", "accuracy % (ties yes)"),
        ("boolq", "compression ×"), ("wikitext", "perplexity"), ("wikitext", "compression ×"),
    ]  # fmt: skip
    # written [8,4,4] first (fake: base + 0.01), [16,8,4] (+ 0.02), [8,8,4] (+ 0.03)
    assert rows.loc[("wikitext", "perplexity")].iloc[2:6].tolist() == [19.5, 19.52, 19.53, 19.51]
    assert rows.loc[("wikitext", "perplexity"), "FP16/INT8 [8,4,4]"] == 19.52
    assert rows.loc[("boolq", "accuracy % (ties no)"), "FP32"] == 62.5
    assert rows.loc[("boolq", "accuracy % (ties yes)"), "FP32"] == 68.75
    assert rows.loc[("boolq", "accuracy % (ties yes)"), "[8,8,4]"] == 70.5
    assert rows.loc[("wikitext", "compression ×")].iloc[2:6].tolist() == [1.0, 3.429, 4.8, 6.0]


def test_records_without_tie_rules_keep_one_accuracy_row():
    records = pd.DataFrame(
        [flatten(_record("boolq", "paper", "accuracy", 0.5)),
         flatten(_record("boolq", "paper", "accuracy", 0.25, "quantized", "fake [16,8,4]",
                         compression_ratio=3.0))]
    )  # fmt: skip
    table = table1(records).set_index("metric")
    assert table.loc["accuracy %", ["FP32", "[16,8,4]"]].tolist() == [50.0, 25.0]
    assert table.loc["compression ×", "[16,8,4]"] == 3.0


def test_published_table1_sets_each_tie_rule_beside_its_system():
    table = published_table1(load_published()).set_index(["task", "metric", "system"])
    gaudi = table.loc[("boolq", "accuracy % (ties no)", "Gaudi2")]
    assert gaudi[["FP32", "[16,8,4]", "[8,4,4]", "BF16/FP8"]].tolist() == [
        57.89,
        54.43,
        52.91,
        57.19,
    ]
    a100 = table.loc[("boolq", "accuracy % (ties yes)", "A100")]
    assert a100[["FP32", "[8,8,4]", "FP16/INT8"]].tolist() == [58.07, 53.98, 57.77]
    assert pd.isna(a100["BF16/FP8"])
    wiki = table.loc[("wikitext", "perplexity", "A100")]
    assert wiki[["FP32", "[16,8,4]", "[8,8,4]", "[8,4,4]"]].tolist() == [12.02, 12.26, 12.8, 12.94]
    split = table.loc[("all", "compression ×", "percentile 8/7/7")]
    assert split[["FP32", "[16,8,4]", "[8,8,4]", "[8,4,4]"]].tolist() == [1.0, 3.28, 4.67, 5.74]


def test_baseline_table_pairs_tie_rules_and_shows_both_wikitext_protocols(study):
    inputs, _ = study
    table = pd.read_csv(inputs["results_dir"] / "tables" / "baseline.csv")
    rows = table.set_index(["task", "protocol", "metric"])["published TinyLlama-1.1B FP32"]
    assert rows[("boolq", "paper", "accuracy % (ties no)")] == "57.89 (Gaudi2, validation)"
    assert rows[("boolq", "paper", "accuracy % (ties yes)")] == "58.07 (A100, validation)"
    assert rows[("boolq", "lm-eval", "accuracy %")] == "57.83 (model card, validation)"
    assert "12.02 (paper, test)" in rows[("wikitext", "paper", "perplexity")]
    ours = table.set_index(["task", "protocol"])["ours"]
    assert ours[("wikitext", "lm-eval")] == 31.25 and ours[("wikitext", "paper")] == 19.5


def test_tradeoff_points_keep_the_published_model_apart(study):
    inputs, _ = study
    records = collect_records(inputs["record_paths"])
    points = tradeoff_points(records, load_published())
    assert set(points["task"]) == {"wikitext", "boolq"}  # the tasks PTQ ran on
    ours = points[points["panel"] == "ours: m (stand-in data)"]
    fp32 = ours[(ours["task"] == "boolq") & (ours["bit list"] == "FP32")]
    assert fp32[["compression", "value"]].values.tolist() == [[1.0, 62.5]]
    assert len(ours) == 2 * (1 + 3 * 2)  # FP32 + 3 bit lists x 2 recipes, per task
    published = points[points["panel"].str.startswith("published: TinyLlama-1.1B")]
    gaudi = published[(published["recipe / system"] == "Gaudi2") & (published["task"] == "boolq")]
    assert gaudi.set_index("bit list").loc["[8,4,4]", ["compression", "value"]].tolist() == [
        5.74, 52.91,
    ]  # fmt: skip
    a100 = published[(published["recipe / system"] == "A100") & (published["task"] == "wikitext")]
    assert a100.set_index("bit list").loc["[8,4,4]", "compression"] == 5.928
    assert not published["bit list"].isin(["FP16/INT8", "BF16/FP8"]).any()  # no published ratio


def test_sensitivity_gets_the_bits_of_every_bit_list(study):
    inputs, _ = study
    frame = collect_sensitivity(inputs["sensitivity"], inputs["assignments"])
    boolq = frame[frame["task"] == "boolq"].set_index("name")
    assert boolq["bit_lists"].iloc[0] == "[16,8,4] / [8,8,4] / [8,4,4]"
    assert boolq["bits"].tolist() == ["16 / 8 / 8", "8 / 8 / 4", "8 / 8 / 4", "4 / 4 / 4"]
    assert set(frame["model"]) == {"m"} and boolq["score"].tolist() == SCORES
    assert calibration_text("wikitext", 4) == "calibration: 4 validation blocks"
    assert calibration_text("boolq", None) == "calibration: all train items"


def test_report_has_every_table_and_figure(study):
    inputs, index = study
    figures = inputs["results_dir"] / "report" / "figures"
    for name in ("baseline.png", "sensitivity.png", "tradeoff.png"):
        assert (figures / name).stat().st_size > 20_000, name
    page = index.read_text()
    assert page.count("<table") == 3 and page.count("<img") == 3
    markdown = (inputs["results_dir"] / "report" / "report.md").read_text()
    assert "Table 1, ours (m; stand-in data)" in markdown and "| boolq" in markdown
    assert "stand-in" in markdown and "Fig. 2: quality against compression" in markdown


def test_report_without_ptq(tmp_path):
    paths = _write([_record("wikitext", "paper", "perplexity", 19.5)], tmp_path)
    index = build_report("t", paths, tmp_path / "results")
    assert index.read_text().count("<table") == 1
    assert pd.read_csv(tmp_path / "results" / "tables" / "records.csv").shape[0] == 1
    assert (tmp_path / "results" / "report" / "figures" / "tradeoff.png").is_file()
