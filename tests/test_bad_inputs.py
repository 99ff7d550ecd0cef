"""Bad values stop with one line naming the file or key and the fix, before any job runs (or at
the job that reads them), and every file present before is byte-identical after."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from accelstudy.errors import StudyError
from accelstudy.study import validate_study
from accelstudy.systems import check_system

from tests.conftest import TINY_CONFIG
from tests.test_compare import _record, _run

SYSTEM = {"name": "x", "device": "cuda", "cards_per_node": 4}


def snapshot(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def one_line(error: pytest.ExceptionInfo, *says: str) -> None:
    text = str(error.value)
    assert "\n" not in text and all(part in text for part in says), text


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (None, "'<top level>': expected object"),  # an empty file
        ({**SYSTEM, "nodes": "2"}, "'nodes': expected integer, got str '2'"),
        ({**SYSTEM, "dtypes": "bfloat16"}, "'dtypes': expected array"),
        ({**SYSTEM, "cards_per_node": 0}, "'cards_per_node': 0 is not valid"),
        ({**SYSTEM, "device": "gpu"}, "'device': 'gpu' is not one of"),
        ({**SYSTEM, "memory_per_card_gb": 0}, "'memory_per_card_gb'"),
        ({**SYSTEM, "slurm": {"qos": "a;b"}}, "'slurm.qos'"),
        ({**SYSTEM, "energy": ["watts"]}, "'energy.0': 'watts' is not one of"),
        ({**SYSTEM, "gpus": 4}, "unknown key(s) ['gpus']"),
    ],
)
def test_a_bad_system_file_is_one_line_naming_file_and_key(spec, says):
    with pytest.raises(StudyError) as error:
        check_system(spec, "config/systems/x.yaml: key")
    one_line(error, "config/systems/x.yaml: key", says)


def test_every_shipped_system_file_validates():
    from accelstudy.paths import SYSTEMS

    for path in SYSTEMS.glob("*.yaml"):
        check_system(yaml.safe_load(path.read_text()), str(path))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"seed": -1}, "'seed'"),
        ({"results_dir": ""}, "'results_dir'"),
        ({"evaluation": {"block_size": 64, "dtype": "float16"}}, "'evaluation.dtype'"),
        ({"system": "cpu-bf16"}, "'evaluation.dtype': float32 is not offered"),
    ],
)
def test_a_bad_config_value_is_one_line(change, says):
    config = {**yaml.safe_load(yaml.safe_dump(TINY_CONFIG)), **change}
    if "system" in change:
        config["evaluation"] = {"block_size": 64, "dtype": "float32"}
    with pytest.raises(StudyError) as error:
        validate_study(config)
    one_line(error, says)


def test_a_zero_card_target_is_no_job(tmp_path):
    """`cards-0` does not match the wildcard: no job, not a ZeroDivisionError inside one."""
    from accelstudy.targets import StudyTargets

    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    constraints = StudyTargets(config, validate_study(config)).constraints()
    assert re.fullmatch(constraints["cards"], "2") and not re.fullmatch(constraints["cards"], "0")
    assert not re.fullmatch(constraints["devices"], "00")
    assert re.fullmatch(constraints["model"], "tiny") and not re.fullmatch(
        constraints["model"], "t.ny"
    )


@pytest.mark.parametrize("score", [float("nan"), float("inf")])
def test_a_sensitivity_table_without_finite_scores_stops(score, tiny, tmp_path):
    from accelstudy.models import save_prepared
    from accelstudy.ptq.clustering import cluster

    model = tmp_path / "model"
    save_prepared(*tiny, model)
    layers = json.loads((model / "config.json").read_text())["num_hidden_layers"]
    scores = [score if i == 1 else float(i) for i in range(layers)]
    table = tmp_path / "table.csv"
    pd.DataFrame({"name": [f"layer-{i}" for i in range(layers)], "layer": range(layers),
                  "score": scores}).to_csv(table, index=False)  # fmt: skip
    before = snapshot(tmp_path)
    with pytest.raises(StudyError) as error:
        cluster(table=table, bits=[8, 4], method="kmeans", remainder="last", model_dir=model,
                out=tmp_path / "a.json")  # fmt: skip
    one_line(error, "table.csv' has no finite score for ['layer-1']", "re-run")
    assert snapshot(tmp_path) == before


def test_a_corrupt_record_names_itself(tmp_path):
    from accelstudy.report.collect import collect_records
    from accelstudy.report.compare import compare

    a = _run(tmp_path, "a", [_record("a", "boolq", 1, 0.5)])
    b = _run(tmp_path, "b", [_record("b", "boolq", 2, 0.5)])
    broken = b / "baseline" / "m" / "0.json"
    broken.write_text(broken.read_text()[:40])
    before = snapshot(tmp_path)
    with pytest.raises(StudyError) as error:
        compare([a, b], tmp_path / "out")
    one_line(error, f"{broken} is not valid JSON", "delete it and re-run snakemake")
    with pytest.raises(StudyError, match="is not valid JSON"):
        collect_records([broken])
    assert snapshot(tmp_path) == before


def test_compare_never_writes_into_a_run(tmp_path):
    a = _run(tmp_path, "a", [_record("a", "boolq", 1, 0.5)])
    b = _run(tmp_path, "b", [_record("b", "boolq", 2, 0.5)])
    from accelstudy.report.compare import compare

    before = snapshot(tmp_path)
    for out in (a / "cmp", b / "tables", a.parent / "t"):
        with pytest.raises(StudyError) as error:
            compare([a, b], out)
        one_line(error, "is inside the results of a study")
    assert snapshot(tmp_path) == before


def test_prepare_model_never_replaces_a_folder_it_did_not_make(tiny, tmp_path):
    from accelstudy.models import prepare_model, save_prepared

    out = tmp_path / "model"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    spec = {"source": "tiny-random", "tiny": {"layers": 2, "hidden": 32}}
    for make in (lambda: prepare_model(spec, out), lambda: save_prepared(*tiny, out)):
        with pytest.raises(StudyError) as error:
            make()
        one_line(error, "holds files that accelstudy did not prepare")
    assert snapshot(tmp_path) == before
    prepare_model(spec, tmp_path / "fresh")  # ours: made, then made again over itself
    prepare_model(spec, tmp_path / "fresh")
