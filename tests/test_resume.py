"""A killed run resumes: its own file, so that pytest-xdist (--dist loadfile) can give it a
worker of its own beside test_workflow.py's study."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest
import yaml

from tests.conftest import SNAKEMAKE, TINY_CONFIG

pytestmark = pytest.mark.e2e


def test_a_killed_run_resumes_without_losing_finished_work(tmp_path, monkeypatch):
    """SIGKILL the whole run mid-study; `--unlock` (a killed run keeps its lock) and the
    same command (with the profiles' --rerun-incomplete) finish it, leaving every
    already-finished record untouched. Its results folder is under a home (given as an
    absolute path): no record, table or report names that home's user. One of its tasks
    comes from a plugin (tests/arc_task.py's ARC, installed by tests/test_tasks.py's
    install_plugin): both baseline jobs evaluate it and the report's table holds it."""
    import os
    import signal
    import time

    from tests.test_tasks import install_plugin

    config = json.loads(json.dumps(TINY_CONFIG))
    for part in ("ptq", "diffusion"):
        config[part]["enabled"] = False
    config["finetune"]["repeats"] = 1  # a record that names its data file
    # two baseline jobs (a model each, two tasks): one finished, one killed
    arc = {"source": "local", "files": {"test": str(install_plugin(tmp_path, monkeypatch))}}
    arc["protocols"] = ["paper", "lm-eval"]
    config["tasks"] = {"wikitext": config["tasks"]["wikitext"], "arc_easy": arc}
    config["models"]["tiny-b"] = config["models"]["tiny"]
    config["finetune"]["models"] = ["tiny"]
    results = tmp_path / "home" / "ada-lovelace" / "results"
    config["results_dir"] = str(results)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    cmd = [*SNAKEMAKE, "--directory", str(tmp_path), "--configfile",
           str(tmp_path / "config.yaml"), "--cores", "1", "--rerun-incomplete"]  # fmt: skip
    baseline = results / "tiny" / "cpu" / "baseline"
    logs = results / "tiny" / "cpu" / "logs" / "baseline"
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 300
    # wait until one model's evaluations (3 records) have finished and the next one's are running
    while time.monotonic() < deadline and run.poll() is None:
        if len(list(baseline.rglob("*.json"))) == 3 and len(list(logs.rglob("*.log"))) == 2:
            break
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before it could be killed"
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    stamps = {p: p.stat().st_mtime_ns for p in baseline.rglob("*.json")}
    assert len({p.relative_to(baseline).parts[0] for p in stamps}) == 1  # one model's
    subprocess.run([*cmd, "--unlock"], check=True, capture_output=True, timeout=300)
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert len(list(baseline.rglob("*.json"))) == 6
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # not recomputed or overwritten
    shown = pd.read_csv(results / "tiny" / "tables" / "baseline.csv")
    arc_rows = shown.loc[shown["task"] == "arc_easy", ["model", "protocol"]]
    assert sorted(map(tuple, arc_rows.values)) == [
        ("tiny", "lm-eval"), ("tiny", "paper"), ("tiny-b", "lm-eval"), ("tiny-b", "paper")]  # fmt: skip
    assert (results / "tiny" / "report" / "index.html").is_file()
    # records travel between sites: their paths are relative to the study's results folder
    kept = [
        p for p in (results / "tiny").rglob("*") if p.suffix in (".json", ".csv", ".md", ".html")
    ]
    kept = [p for p in kept if p.relative_to(results / "tiny").parts[1:2] != ("logs",)]
    assert len([p for p in kept if "/finetune/" in str(p)]) == 1 and len(kept) > 8
    assert not [p for p in kept if "ada-lovelace" in p.read_text()]
    table = pd.read_parquet(results / "tiny" / "tables" / "records.parquet").astype(str)
    assert not table.apply(lambda column: column.str.contains("ada-lovelace")).any().any()
    (trained,) = (results / "tiny" / "cpu" / "finetune").rglob("*.json")
    assert json.loads(trained.read_text())["parameters"]["data"]["file"] == (
        "data/instructions/train.jsonl"
    )
