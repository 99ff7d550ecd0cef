"""Each option's default lives in one place, the config schema: a copy of the project with
two defaults changed there, and the CLI, the sweep point and the rules follow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, TINY_CONFIG

CHANGED = {  # a line of the schema -> the same line with another default
    "max_steps: { type: integer, minimum: 1, default: 10 }": "max_steps: { type: integer, minimum: 1, default: 7 }",
    "group_size: { type: integer, minimum: 1, default: 128 }": "group_size: { type: integer, minimum: 1, default: 64 }",
}  # fmt: skip
READ_BACK = """
import json
from accelstudy import options
from accelstudy.cli import build_parser
from accelstudy.points import FinetunePoint
flags = ["quantize", "--study", "s", "--system", "cpu", "--model-name", "m", "--task", "boolq",
         "--data-source", "standin", "--model-dir", "m", "--data", "d", "--settings", "{}",
         "--assignment", "a", "--runs", '[{"recipe": "fake", "out": "o", "items": "i"}]']
print(json.dumps({"cli": build_parser().parse_args(flags).group_size,
                  "point": FinetunePoint().max_steps, "schema": str(options.SCHEMAS)}))
"""


def test_changing_a_default_is_one_line_of_the_schema(tmp_path):
    for part in ("workflow", "config", "resources"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "Snakefile", tmp_path / "Snakefile")
    schema = tmp_path / "workflow" / "schemas" / "config.schema.yaml"
    text = schema.read_text()
    for line, changed in CHANGED.items():
        assert text.count(line) == 1, line
        text = text.replace(line, changed)
    schema.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "workflow")}
    read = subprocess.run([sys.executable, "-c", READ_BACK], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert json.loads(read.stdout) == {"cli": 64, "point": 7, "schema": str(schema.parent)}
    config = json.loads(json.dumps(TINY_CONFIG))
    del config["finetune"]["max_steps"]  # the study leaves both to their defaults
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(tmp_path / "Snakefile"), "--directory",
           str(tmp_path), "--configfile", str(tmp_path / "study.yaml"), "-n", "-p"]  # fmt: skip
    plan = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]
    quantize = [line for line in plan.stdout.splitlines() if "accelstudy quantize" in line]
    finetune = [line for line in plan.stdout.splitlines() if "accelstudy finetune" in line]
    assert quantize and all("--group-size 64 " in line for line in quantize)
    assert finetune and all('"max_steps": 7' in line for line in finetune)


def test_who_loads_the_weights_is_one_of_three():
    """A strategy's `loads` is a Loads member (the planner and the ranks compare members, not
    text): its text is taken, anything else stops the registry with a ValueError."""
    import pytest
    from accelstudy import strategies

    assert strategies.Strategy("z", "Z", "ddp", loads="rank 0").loads is strategies.Loads.RANK_ZERO
    with pytest.raises(ValueError, match="'rank zero' is not a valid Loads"):
        strategies.Strategy("z", "Z", "ddp", loads="rank zero")


def test_a_recipe_registered_alone_reaches_the_schema_the_rules_and_table_1(monkeypatch):
    """The recipe registry (accelstudy.recipes) is the one list: a recipe added there and
    nowhere else is a config choice, passed its own options only where it runs (the rules'
    flags, its records' digests), and headed in Table 1 by what it says of itself."""
    import pandas as pd
    from accelstudy import options, recipes
    from accelstudy.config import validate_config
    from accelstudy.report import quantization
    from accelstudy.systems import load_system
    from accelstudy.targets import StudyTargets

    sim = recipes.Recipe("int8-sim", None, "INT8 sim", "m:f", simulated=True, options=("bits",))
    monkeypatch.setitem(recipes.RECIPES, "int8-sim", sim)
    options._schema_of.cache_clear()
    try:
        assert options.node("ptq.recipes")["items"]["enum"][-1] == "int8-sim"
        config = json.loads(json.dumps(TINY_CONFIG))
        config["ptq"]["recipes"] = ["nvidia", "int8-sim"]
        config = validate_config(config)
        config["ptq"]["bits"] = 7  # the recipe's own option (one the schema would name)
        study = StudyTargets(config, load_system("cpu"))
        job = {"model": "tiny", "task": "wikitext", "granularity": "layer", "bits": "16-8-4"}
        assert study.recipe_flags(type("W", (), job)()) == "--bits 7"  # the job runs it
        assert study.recipe_flags(type("W", (), job | {"recipe": "nvidia"})()) == ""
        records = pd.DataFrame({"stage": "quantized", "method": ["int8-sim 8-4", "nvidia 8-4"]})
        _, quantized = quantization._quantized(records.assign(protocol=None))
        assert quantized["column"].tolist() == ["8-4", "FP16/INT8 8-4"]  # simulated: bits alone
    finally:
        options._schema_of.cache_clear()


def test_the_protocols_are_one_list(monkeypatch, capsys):
    """tasks.PROTOCOLS names them for the config's tasks.<name>.protocols, a record's protocol
    and the CLI's --protocol; neither schema file lists them itself."""
    from accelstudy import cli, options, records, tasks
    from accelstudy.cli import build_parser

    assert cli.RUN_CHOICES["protocol"] is tasks.PROTOCOLS  # what a baseline run may name
    run = {"task": "boolq", "data": "d", "data_source": "standin", "settings": {}, "limit": 1}
    run |= {"out": "o", "items": "i"}
    baseline = ["baseline", "--study", "s", "--system", "cpu", "--model-name", "m"]
    baseline += ["--model-dir", "m", "--runs"]
    parsed = build_parser().parse_args([*baseline, json.dumps([run | {"protocol": "paper"}])])
    assert parsed.runs[0]["protocol"] == "paper" and parsed.runs[0]["out"] == Path("o")
    with pytest.raises(SystemExit):  # a usage error, one line
        build_parser().parse_args([*baseline, json.dumps([run | {"protocol": "helm"}])])
    assert "'helm' is not one of paper, lm-eval" in capsys.readouterr().err
    monkeypatch.setattr(tasks, "PROTOCOLS", (*tasks.PROTOCOLS, "helm"))
    monkeypatch.setattr(options, "PROTOCOLS", tasks.PROTOCOLS)
    monkeypatch.setattr(records, "PROTOCOLS", tasks.PROTOCOLS)
    options._schema_of.cache_clear()
    try:
        assert options.node("tasks.*.protocols")["items"]["enum"][-1] == "helm"
        assert records.record_schema()["properties"]["protocol"]["enum"][-1] == "helm"
    finally:
        options._schema_of.cache_clear()
    for schema in ("config", "record"):
        assert (
            "lm-eval" not in (ROOT / "workflow" / "schemas" / f"{schema}.schema.yaml").read_text()
        )
