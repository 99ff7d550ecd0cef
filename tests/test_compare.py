"""`accelstudy compare`: records matched on the work they measured, ratios, the left-out list."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from accelstudy.records import provenance, write_record
from accelstudy.report.compare import CompareError, compare, load, ratios, split


def _record(system: str, task: str, tokens: float, value: float, **given) -> dict:
    """A baseline record; `given` may set limit (10), source (standin), accelerator, repeat."""
    limit, source, repeat = (
        given.get("limit", 10),
        given.get("source", "standin"),
        given.get("repeat", 0),
    )
    accelerator = given.get("accelerator")
    model = {"source": "hf", "id": "org/m", "commit": given.get("commit", "c1")}
    data = {"source": source, "digest": given.get("digest"), "prepared": f"sha256:{system}"}
    record = {
        "stage": "baseline", "study": "t", "system": system, "device": "cpu", "model": "m",
        "task": task, "method": "fp32", "protocol": "paper", "data_source": source,
        "inputs": {"model": model, "data": data},
        "parameters": {"limit": limit, "dtype": "float32" if system == "a" else "bfloat16",
                       "repeat": repeat},
        "metrics": {"accuracy": value, "primary_metric": "accuracy", "wall_time_s": 1.0,
                    "tokens_per_s": tokens, "peak_memory_bytes": 1},
        "provenance": provenance("h", "cpu", "cpu", 1.0),
    }  # fmt: skip
    record["provenance"]["system"] = {"accelerator": accelerator or f"{system}-card",
                                      "memory_per_card_gb": 16}  # fmt: skip
    return record


def _run(root: Path, name: str, records: list[dict]) -> Path:
    run = root / name / "results" / "t"
    for i, record in enumerate(records):
        write_record(run / "baseline" / "m" / f"{i}.json", record)
    (run / "baseline" / "chunk.json").write_text(json.dumps({"scores": [1, 2]}))  # not a record
    return run


@pytest.fixture
def runs(tmp_path):
    """System a and system b measured boolq and wikitext alike (b twice as fast, b's boolq
    with a repeat); b's hellaswag used 12 items, a's 10; a's piqa was real data, b's stand-in."""
    a = _run(tmp_path, "site-a", [
        _record("a", "boolq", 100, 0.6), _record("a", "wikitext", 50, 20.0),
        _record("a", "hellaswag", 80, 0.3), _record("a", "piqa", 10, 0.5, source="hf"),
    ])  # fmt: skip
    b = _run(tmp_path, "site-b", [
        _record("b", "boolq", 200, 0.6), _record("b", "boolq", 240, 0.6, repeat=1),
        _record("b", "wikitext", 100, 21.0), _record("b", "hellaswag", 160, 0.3, limit=12),
        _record("b", "piqa", 20, 0.5),
    ])  # fmt: skip
    return a, b


def test_records_meet_only_where_the_work_is_the_same(runs):
    records = load(runs)
    assert len(records) == 9  # the sensitivity-like chunk is not a record
    matched, left = split(records)
    assert sorted(set(matched["task"])) == ["boolq", "wikitext"]
    reasons = dict(zip(left["system"] + ":" + left["task"], left["reason"], strict=True))
    assert reasons["a:hellaswag"] == "limit: 10 here, 12 there"
    assert reasons["b:hellaswag"] == "limit: 12 here, 10 there"
    assert reasons["a:piqa"].startswith("data_source: hf here, standin there")  # never mixed
    table = ratios(matched, reference="a").set_index("quantity")
    speed = table.loc["tokens_per_s"]
    # boolq: b's repeats 200 and 240 -> 220, / 100 = 2.2; wikitext 100 / 50 = 2.0
    assert speed["ratio"] == pytest.approx(2.1) and speed["points"] == 2
    assert (speed["min"], speed["max"]) == (2.0, 2.2) and speed["repeats"] == "1.5 / 1"
    assert table.loc["accuracy (metric)", "ratio"] == pytest.approx((1 + 21 / 20) / 2)
    assert table.loc["tokens_per_s", "verdict"] == "better"  # faster
    assert table.loc["accuracy (metric)", "verdict"] == "better"
    assert speed[["interval_low", "interval_high"]].isna().all()  # a side of one repeat


def test_direction_and_interval_with_three_repeats(tmp_path):
    """b's perplexity is higher (worse); its speed, 3 repeats a side, gets the repeats rule's
    interval around the ratio; repeats that agree give an interval of zero width."""
    speeds = {"a": [100, 110, 90], "b": [150, 160, 170]}
    runs = []
    for system, tokens in speeds.items():
        made = [_record(system, "wikitext", t, 20.0 if system == "a" else 22.0, repeat=r)
                for r, t in enumerate(tokens)]  # fmt: skip
        for record in made:
            record["metrics"] |= {"perplexity": record["metrics"].pop("accuracy")}
            record["metrics"]["primary_metric"] = "perplexity"
        runs.append(_run(tmp_path, f"site-{system}", made))
    table = ratios(split(load(runs))[0], reference="a").set_index("quantity")
    assert table.loc["perplexity (metric)", "verdict"] == "worse"
    interval = ["interval_low", "interval_high"]
    assert tuple(table.loc["perplexity (metric)", interval]) == (1.1, 1.1)
    speed = table.loc["tokens_per_s"]
    assert speed["ratio"] == 1.6 and speed["verdict"] == "better"
    # the slowest of b over the fastest of a, and the fastest over the slowest
    assert tuple(speed[interval]) == (round(150 / 110, 4), round(170 / 90, 4))


def test_energy_and_cost_beside_speed(tmp_path):
    """Joules and charge per 1M tokens (lower is better), each a ratio where both systems
    measured it; a charge in another unit is set beside, never divided."""
    made = {"a": _record("a", "boolq", 100, 0.6), "b": _record("b", "boolq", 200, 0.6)}
    for system, record in made.items():
        record["energy"] = {"status": "ok", "sources": ["nvml"], "job_j": {"total": 9.0}}
        record["energy"]["j_per_token"] = 2.0 if system == "a" else 0.5
        unit = "GPU node-hours" if system == "a" else "GPU SUs"
        record["cost"] = {"status": "ok", "units": 0.5, "unit": unit, "hours": 0.5}
        record["cost"] |= {"allocation": {}, "doc": "x"}
    runs = [_run(tmp_path, f"site-{s}", [r]) for s, r in made.items()]
    table = ratios(split(load(runs))[0], reference="a").set_index("quantity")
    assert table.loc["j_per_token", "ratio"] == 0.25
    assert table.loc["j_per_token", "verdict"] == "better"
    apart = table.loc["cost_per_mtok"]
    assert pd.isna(apart["ratio"])
    assert apart["verdict"] == "not comparable: GPU SUs against GPU node-hours"


def test_the_report_traces_every_number(runs, tmp_path):
    index = compare(runs, tmp_path / "cmp", reference="a")
    tables = tmp_path / "cmp" / "tables"
    matched = pd.read_csv(tables / "matched.csv")
    assert set(matched["record"].map(lambda p: Path(p).parent.name)) == {"m"}
    assert matched["git_commit"].notna().all() and matched["versions"].str.contains("torch").all()
    assert len(pd.read_csv(tables / "left_out.csv")) == 4
    assert "Ratios against a" in index.read_text()
    assert "limit: 10 here, 12 there" in (tmp_path / "cmp" / "report" / "report.md").read_text()


def test_not_a_results_directory(tmp_path):
    with pytest.raises(CompareError, match=r"'.*nothing' is not a results directory: pass "):
        load([tmp_path / "nothing"])


def test_a_record_of_another_schema_version(runs):
    path = next((runs[0] / "baseline" / "m").glob("0.json"))
    record = json.loads(path.read_text())
    del record["schema_version"]
    path.write_text(json.dumps(record))
    with pytest.raises(CompareError, match=r"0.json: record schema version none, but this "
                                           r"accelstudy reads version 2; re-run"):  # fmt: skip
        load(runs)


def test_records_of_the_previous_version_are_shown_never_matched(runs):
    """Version 1 records did not name model and data revisions: listed, with why."""
    path = runs[0] / "baseline" / "m" / "0.json"  # a's boolq
    record = json.loads(path.read_text())
    del record["inputs"]
    path.write_text(json.dumps(record | {"schema_version": 1}))
    matched, left = split(load(runs))
    assert "a" not in set(matched.loc[matched["task"] == "boolq", "system"])
    reason = left.set_index(left["system"] + ":" + left["task"]).loc["a:boolq", "reason"]
    assert reason.startswith("provenance unknown: record schema version 1")


def test_another_model_commit_or_data_file_is_other_work(tmp_path):
    a = _run(tmp_path, "site-a", [_record("a", "boolq", 1, 0.6), _record("a", "piqa", 1, 0.5,
             source="local", digest="sha256:1")])  # fmt: skip
    b = _run(tmp_path, "site-b", [_record("b", "boolq", 1, 0.6, commit="c2"),
             _record("b", "piqa", 1, 0.5, source="local", digest="sha256:2")])  # fmt: skip
    matched, left = split(load([a, b]))
    assert matched.empty
    reasons = dict(zip(left["system"] + ":" + left["task"], left["reason"], strict=True))
    assert reasons["a:boolq"] == "inputs.model.commit: c1 here, c2 there"
    assert reasons["b:piqa"] == "inputs.data.digest: sha256:2 here, sha256:1 there"


def test_one_system_name_two_machines(tmp_path):
    a = _run(tmp_path, "site-a", [_record("a", "boolq", 100, 0.6)])
    b = _run(tmp_path, "site-b", [_record("a", "boolq", 100, 0.6, accelerator="H100")])
    with pytest.raises(CompareError) as error:
        load([a, b])
    text = str(error.value)
    assert "runs name the same system 'a' but different machines" in text
    assert "a-card, 16 GB per card" in text and "H100, 16 GB per card" in text
    assert "\n" not in text


def test_runs_on_data_one_row_apart_are_not_matched(tiny, tmp_path, monkeypatch):
    """Two runs of the baseline stage, alike but for one row of the local BoolQ file: the
    records name each file's sha256, and compare lists them apart with the differing digest."""
    import hashlib

    from accelstudy.data.sources import prepare_data
    from accelstudy.evaluate.baseline import baseline
    from accelstudy.models import save_prepared

    monkeypatch.chdir(tmp_path)
    save_prepared(*tiny, tmp_path / "model")
    rows = [{"question": f"is {i} even", "passage": f"{i} is a number.", "answer": i % 2 == 0}
            for i in range(4)]  # fmt: skip
    digests, runs = {}, []
    for system, last in (("cpu", True), ("cpu-bf16", False)):
        file = Path(f"{system}.jsonl")
        file.write_text("".join(json.dumps(r) + "\n" for r in [*rows, {**rows[0], "answer": last}]))
        digests[system] = "sha256:" + hashlib.sha256(file.read_bytes()).hexdigest()
        run = tmp_path / system / "results" / "t"
        data = run / "data" / "boolq" / "validation.jsonl"
        prepare_data(
            "boolq", {"source": "local", "files": {"validation": str(file)}}, "validation", data
        )
        settings = {"boolq_max_length": 512, "dtype": "float32"}
        baseline(study="t", system=system, model_name="tiny", model_dir=tmp_path / "model",
                 task="boolq", data=data, data_source="local", settings=settings, limit=None,
                 protocol="paper", out=run / "baseline" / "tiny" / "boolq" / "paper.json",
                 items=run / "baseline" / "tiny" / "boolq" / "paper.items.parquet")  # fmt: skip
        runs.append(run)
    matched, left = split(load(runs))
    assert matched.empty and len(left) == 2
    reason = left.set_index("system").loc["cpu", "reason"]
    assert reason == f"inputs.data.digest: {digests['cpu']} here, {digests['cpu-bf16']} there"


def test_the_repeats_interval_holds_the_median_as_stated():
    """Every speed, energy and charge interval: 95% for the true median, Student's t over the
    logs of the repeats (tests/test_coverage.py holds its coverage); by hand at 1, 2, 3."""
    import numpy as np
    from accelstudy.uncertainty import repeats_interval

    half = 4.302653 * np.std(np.log([1.0, 2.0, 3.0]), ddof=1) / np.sqrt(3)
    middle = np.log(6) / 3
    shown = f"{np.exp(middle - half):.4g}-{np.exp(middle + half):.4g} (3 repeats, 95%)"
    assert repeats_interval(pd.Series([3.0, 1.0, 2.0])) == shown == "0.4571-7.223 (3 repeats, 95%)"
    assert repeats_interval(pd.Series([2.0])) == "-"  # one repeat: the table's note says why
