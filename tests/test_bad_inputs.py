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
        ({**SYSTEM, "peak_flops": "by-name"}, "'peak_flops'"),  # a workstation: by-device-name
        (
            {**SYSTEM, "peak_flops": {"doc": "https://a", "bfloat16": 0}},
            "'peak_flops.bfloat16': 0 is less than or equal to the minimum of 0",
        ),  # the 0 named
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
        ({"models": {"tiny": {"source": "random", "config": "llama-4"}}}, "'models.tiny.config'"),
    ],
)
def test_a_bad_config_value_is_one_line(change, says):
    config = {**yaml.safe_load(yaml.safe_dump(TINY_CONFIG)), **change}
    if "system" in change:
        config["evaluation"] = {"block_size": 64, "dtype": "float32"}
    with pytest.raises(StudyError) as error:
        validate_study(config)
    one_line(error, says)


def changed(changes: dict) -> dict:
    """The tiny study with dotted keys set."""
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return config


LOCAL = {"source": "local", "files": {"validation": "b.jsonl"}}
ROW = b'{"question": "q", "passage": "p", "answer": true}\n'
# (keys changed, the local file's bytes, what the line says): refused before any job
BEFORE_ANY_JOB = [
    ({"diffusion.total_iterations": 2}, None,  # 2 devices: 1 iteration each, the warm-up's
     "'diffusion.total_iterations': diffusion.total_iterations 2 over 2 devices is 1 per device"),
    ({"finetune.max_steps": 1}, None,
     "'finetune.max_steps': finetune.max_steps 1 leaves no step to time after finetune.throughput_warmup_steps 1: set max_steps to at least 2"),
    ({"ptq.bit_lists": [[16, 8, 3]]}, None,
     "'ptq.bit_lists.0': recipe 'nvidia' stores [4, 8, 16] bits only: [3] would be stored at another width"),
    ({"ptq.chunks": 5}, None, "'ptq.chunks': 5 chunks, but model 'tiny' has 4 layer targets (4 layers) to scan; set ptq.chunks to at most 4"),
    ({"seed": 2**32}, None, "'seed': 4294967296 is greater than the maximum of 4294967295"),
    ({"finetune.lora.dropout": 1}, None, "'finetune.lora.dropout': 1 is greater than or equal to the maximum of 1"),
    ({"diffusion.model.dropout": 1.0}, None, "'diffusion.model.dropout'"),
    ({"diffusion.model.inner_channels": 3}, None, "'diffusion.model.inner_channels': 3 is less than the minimum of 4"),
    ({"diffusion.model.inner_channels": 48}, None, "48 channels at level 0 do not divide into diffusers' 32 norm groups"),
    ({"diffusion.model.inner_channels": 4, "diffusion.model.attention_resolutions": [16]}, None,
     "'diffusion.model.inner_channels': attention at 16 pixels has 4 channels, fewer than one 8-channel head"),
    ({"diffusion.quality.sampling_steps": 30, "diffusion.schedule.steps": 20}, None,
     "'diffusion.quality.sampling_steps': 30 sampling steps, but the schedule has 20"),
    ({"diffusion.data.patches": 6}, None, "'diffusion.data.patches': 6 images over 2 devices leave 3 per device, no batch of 4; set patches to at least 8"),
    ({"models.tiny.tiny": {"hidden": 36, "heads": 4, "kv_heads": 2}}, None, "'models.tiny.tiny.hidden': 9 per head (hidden / heads), but RoPE needs an even number"),
    ({"results_dir": "config"}, None, "'results_dir': 'config' is inside this repository's source"),
    ({"results_dir": "."}, None, "'results_dir': '.' is inside this repository's source"),
    ({"results_dir": "workflow/out"}, None, "'results_dir': 'workflow/out' is inside"),
    ({"results_dir": "tests/../resources"}, None, "'results_dir': 'tests/../resources' is inside"),
    ({"tasks.boolq": LOCAL}, b"", "'tasks.boolq.files.validation': 'b.jsonl' is empty; give the split's rows"),
    ({"tasks.boolq": LOCAL}, b"\n \n", "'b.jsonl' is empty"),
    ({"tasks.boolq": LOCAL}, b"\xef\xbb\xbf" + ROW, "'b.jsonl' starts with a byte-order mark the JSON reader refuses; save it without"),
    ({"tasks.boolq": LOCAL}, ROW + ROW[:-3] + b"\n" + ROW, "'tasks.boolq.files.validation': 'b.jsonl' line 2 is not valid JSON (Expecting value); fix or delete that line"),
    ({"tasks.boolq": LOCAL}, ROW + b"[1, 2]\n", "'b.jsonl' line 2 is not a JSON object"),
    ({"tasks.boolq": LOCAL}, ROW + b"\xff\n", "'b.jsonl' line 2 column 1 is not UTF-8; save the file as UTF-8"),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "data", "says"), BEFORE_ANY_JOB,
                         ids=[f"{'+'.join(c)}-{i}" for i, (c, _, _) in enumerate(BEFORE_ANY_JOB)])  # fmt: skip
def test_a_value_that_would_fail_inside_a_job_stops_before_any(changes, data, says, tmp_path):
    """What a job would refuse (or run to no measurement), named before any job runs, by key,
    file and line; the files around it untouched."""
    from accelstudy.paths import PROJECT_ROOT

    if data is not None:
        (tmp_path / "b.jsonl").write_bytes(data)
    before = snapshot(tmp_path)
    base = PROJECT_ROOT if "results_dir" in changes else tmp_path
    with pytest.raises(StudyError) as error:
        validate_study(changed(changes), base_dir=base)
    one_line(error, says)
    assert snapshot(tmp_path) == before


def test_results_and_widths_that_work_are_accepted(tmp_path):
    """The default results/ (ignored by git), a folder outside; the fake recipe's any width."""
    from accelstudy.paths import PROJECT_ROOT

    for results in ("results", str(tmp_path / "out")):
        validate_study(changed({"results_dir": results}), base_dir=PROJECT_ROOT)
    validate_study(changed({"ptq.bit_lists": [[16, 8, 3]], "ptq.recipes": ["fake"]}))
    validate_study(changed({"diffusion.total_iterations": 3}))  # 2 each on 2 devices: 1 timed


def test_a_bad_data_file_read_by_its_job_names_the_line(tmp_path):
    """The job's reader says the same line (pandas would name a byte position)."""
    from accelstudy.data.sources import read_local

    bad = tmp_path / "b.jsonl"
    bad.write_bytes(ROW + b'{"question": "q",\n')
    with pytest.raises(StudyError) as error:
        read_local(bad)
    one_line(error, f"data file '{bad}' line 2 is not valid JSON")


def test_items_longer_than_the_context_are_counted_in_the_record(tiny, cpu, standin):
    """Scored on what is left of them (possibly nothing), and counted: `truncated_items`."""
    from accelstudy.evaluate import evaluate_task

    model, tokenizer = tiny
    rows = standin["boolq"][:4]
    for max_length, truncated in ((2048, 0), (8, 4)):
        settings = {"boolq_max_length": max_length, "lm_eval_max_length": max_length}
        for protocol in ("paper", "lm-eval"):
            metrics, _ = evaluate_task(model, tokenizer, "boolq", protocol, rows, settings, cpu)
            assert metrics["truncated_items"] == truncated, (protocol, max_length)


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


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)  # 9^9 strings once expanded: what Snakemake's loader and a schema walk would try
YAML_FILES = [  # (the study file's text, what the line says): refused as read, nothing built
    ("study: a\nseed: 1\nstudy: b\n", "key 'study' appears twice (line 3): keep one"),
    (LAUGHS, "its aliases expand past 100,000 nodes"),
    ("a: &x [1, *x]\n", "an alias at line 1 holds itself"),
    ("finetune:\n  learning_rate: .nan\n", "key 'finetune.learning_rate' is not a finite number"),
    ("ptq:\n  bit_lists: [[16, -.inf]]\n", "key 'ptq.bit_lists.0.1' is not a finite number"),
    ("study: [a\n", "not valid YAML (line 2, column 1)"),
    ("- study\n", "expected a mapping of keys, got list"),
    ("study: a\n\tseed: 1\n", "not valid YAML"),
]


@pytest.mark.parametrize(("text", "says"), YAML_FILES, ids=range(len(YAML_FILES)))
def test_a_study_file_yaml_fault_is_one_line_before_anything(text, says, tmp_path):
    """check-config's reader, the Snakefile's and `accelstudy snakemake`'s (before Snakemake's
    own loader): one line naming the file; nothing on disk changes."""
    from accelstudy.locks import run_snakemake
    from accelstudy.study import load_study

    study = tmp_path / "study.yaml"
    study.write_text(text)
    before = snapshot(tmp_path)
    with pytest.raises(StudyError) as error:
        load_study(study)
    one_line(error, str(study), says)
    with pytest.raises(StudyError) as error:  # refused before Snakemake (`false`) would run
        run_snakemake(tmp_path, ["false", "--cores", "1", "--configfile", str(study)])
    one_line(error, says)
    assert snapshot(tmp_path) == before


def test_a_copied_system_file_still_naming_its_source_is_refused(tmp_path, monkeypatch):
    """A system's records live under its file's name: a copy of perlmutter.yaml saved as
    mysite.yaml but still saying `name: perlmutter` would show perlmutter's records as its own."""
    from accelstudy import systems
    from accelstudy.paths import SYSTEMS

    (tmp_path / "mysite.yaml").write_text((SYSTEMS / "perlmutter.yaml").read_text())
    monkeypatch.setattr(systems, "SYSTEMS", tmp_path)
    with pytest.raises(StudyError) as error:
        systems.load_system("mysite")
    one_line(error, "config/systems/mysite.yaml: key 'name' says 'perlmutter'", "name: mysite")
    for path in SYSTEMS.glob("*.yaml"):  # every shipped one says its own name
        assert yaml.safe_load(path.read_text())["name"] == path.stem


def test_a_broken_system_file_no_run_uses_stops_no_report(tmp_path, monkeypatch, capsys):
    """The report's and the forecast's tables over every system file pass a broken one over,
    named in one line; the systems that load are all there."""
    import shutil

    from accelstudy import systems
    from accelstudy.paths import SYSTEMS
    from accelstudy.report.estimates import sr3_judged

    for path in SYSTEMS.glob("*.yaml"):
        shutil.copy(path, tmp_path)
    (tmp_path / "old-site.yaml").write_text("name: old-site\ndevice: gpu\n")
    monkeypatch.setattr(systems, "SYSTEMS", tmp_path)
    names = [system.name for system in systems.every_system()]
    assert sorted(names) == sorted(p.stem for p in SYSTEMS.glob("*.yaml"))
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("accelstudy: passed over old-site.yaml:"), said
    assert {"A100", "V100"} <= set(sr3_judged()["device"])


@pytest.mark.parametrize("kind", ["folder", "pipe"])
def test_a_data_file_that_is_a_folder_or_a_pipe_is_named_so(kind, tmp_path):
    """Not 'does not exist' (it does), and a pipe is never opened (its read would block)."""
    import os

    path = tmp_path / "b.jsonl"
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(StudyError) as error:
        validate_study(changed({"tasks.boolq": LOCAL}), base_dir=tmp_path)
    one_line(error, "'tasks.boolq.files.validation': file 'b.jsonl' is not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


LLAMA = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}  # fmt: skip
# (config.json's text, what the line says): a random-weight model's config, read at parse time
RANDOM_CONFIGS = [
    ("{", "is not valid JSON (Expecting property name"),
    ("[1, 2]", "is not a JSON object"),
    (json.dumps({**LLAMA, "model_type": None}), "names no model_type"),
    (json.dumps({k: v for k, v in LLAMA.items() if k != "num_hidden_layers"}),
     "lacks num_hidden_layers or n_layer"),
    (json.dumps({**LLAMA, "hidden_size": -64}), "hidden_size -64 must be a whole number above 0"),
    (json.dumps({**LLAMA, "vocab_size": 5.5}), "vocab_size 5.5 must be a whole number"),
    (json.dumps({**LLAMA, "num_key_value_heads": 3}), "4 heads do not group over 3 key/value heads"),
    (json.dumps({**LLAMA, "hidden_size": 66}), "hidden_size 66 does not split over 4 heads"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "says"), RANDOM_CONFIGS)
def test_a_bad_random_weight_config_is_one_line_before_any_job(text, says, tmp_path):
    """A `source: random` model's config.json, malformed, short of a field or with a size no
    model has, named at parse time (a job would die in transformers with a traceback)."""
    (tmp_path / "config.json").write_text(text)
    before = snapshot(tmp_path)
    study = changed({"models": {"tiny": {"source": "random", "config": "config.json"}}})
    with pytest.raises(StudyError) as error:
        validate_study(study, base_dir=tmp_path)
    one_line(error, "'models.tiny.config'", says)
    assert snapshot(tmp_path) == before


def test_a_results_folder_no_run_can_use_is_one_line(tmp_path, monkeypatch):
    """A results_dir that is a file, the root, holds a line break or cannot be written; a study
    name longer than a file name: each refused by key before any job, nothing written."""
    (tmp_path / "taken").write_text("a file")
    before = snapshot(tmp_path)
    cases = [
        ({"results_dir": "taken"}, "'results_dir': 'taken' is a file, not a folder"),
        ({"results_dir": "taken/sub"}, "'results_dir': "),
        ({"results_dir": "/"}, "'results_dir': is the file system's root"),
        ({"results_dir": "out\nput"}, "'results_dir': holds control characters ['0x0a']"),
        ({"study": "s" * 201}, "'study': is 201 bytes, past a file name's 200"),
    ]
    for changes, says in cases:
        with pytest.raises(StudyError) as error:
            validate_study(changed(changes), base_dir=tmp_path)
        one_line(error, says)
    monkeypatch.setattr("os.access", lambda *_: False)  # a read-only folder (root writes anyway)
    with pytest.raises(StudyError) as error:
        validate_study(changed({"results_dir": "new/out"}), base_dir=tmp_path)
    one_line(error, f"'{tmp_path}' is not writable here")
    assert snapshot(tmp_path) == before


def test_a_record_in_another_records_place_is_refused_by_the_report(tmp_path):
    """A BoolQ record copied over the HellaSwag record's file: the report (and `compare`) name
    it with the fix instead of showing BoolQ twice; a record in its own place is read."""
    from accelstudy.records import write_record
    from accelstudy.report.collect import collect_records
    from accelstudy.report.compare import find_records

    run = tmp_path / "results" / "t"
    place = run / "cpu" / "baseline" / "m" / "hellaswag" / "paper.json"
    write_record(place, _record("cpu", "hellaswag", 80, 0.3))
    assert len(collect_records([place])) == 1
    write_record(place, _record("cpu", "boolq", 100, 0.6))
    with pytest.raises(StudyError) as error:
        collect_records([place])
    one_line(error, f"'{place}' holds a record of task 'boolq', not 'hellaswag'", "move it back")
    with pytest.raises(StudyError) as error:
        find_records(run)
    one_line(error, "task 'boolq', not 'hellaswag'")
    write_record(place, _record("b", "hellaswag", 80, 0.3))  # system b's, in the cpu folder
    with pytest.raises(StudyError) as error:
        collect_records([place])
    one_line(error, "system 'b', not 'cpu'")
