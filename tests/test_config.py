"""Config validation: defaults are filled; each kind of bad input is one clear line."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from accelstudy.errors import ConfigError
from accelstudy.study import load_study, validate_study

from tests.conftest import ROOT

GOOD = {
    "study": "t",
    "models": {"tiny": {"source": "tiny-random"}},
    "tasks": {"boolq": {"source": "standin"}},
}


def check(config: dict, tmp_path=None) -> dict:
    config = copy.deepcopy(config)
    validate_study(config, base_dir=tmp_path)
    return config


def test_defaults_are_filled():
    config = check(GOOD)
    assert config["system"] == "cpu"
    assert config["evaluation"]["block_size"] == 512
    assert config["tasks"]["boolq"]["protocols"] == ["paper"]
    assert config["tasks"]["boolq"]["dataset"] == "google/boolq"
    assert config["tasks"]["boolq"]["eval_split"] == "validation"
    assert config["models"]["tiny"]["tiny"]["layers"] == 4


@pytest.mark.parametrize(
    "path", ["config/config.yaml", "config/paper.yaml", "config/gpu-smoke.yaml"]
)
def test_shipped_configs_are_valid(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the paper's instruction data: a local file, here empty
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "psychology.parquet").touch()
    assert load_study(ROOT / path)["study"]


def test_a_missing_local_data_file_stops_the_study(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError, match=r"'finetune\.data\.file': 'data/psychology\.parquet' is no"
    ):
        load_study(ROOT / "config" / "paper.yaml")


def with_change(path: str, value) -> dict:
    config = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node[key]
    node[last] = value
    return config


BAD = [
    ("evaluation", {"block_sise": 512}, "'evaluation': unknown key(s) ['block_sise']"),
    ("seed", "one", "'seed': expected integer"),
    ("tasks.hellaswog", {"source": "standin"}, "'tasks'"),
    ("tasks.boolq.protocols", ["paper", "harness"], "'tasks.boolq.protocols.1': 'harness' is not one of"),
    ("models.tiny.source", "ollama", "'models.tiny.source': 'ollama' is not one of"),
    ("tasks.boolq.limit", 0, "'tasks.boolq.limit'"),
    ("system", "frontier", "'system': unknown system 'frontier'"),
    ("models.m", {"source": "hf"}, "'models.m.id': required when source is 'hf'"),
    ("models.m", {"source": "local", "path": "nope"}, "'models.m.path': directory 'nope' does not exist"),
    ("models.m", {"source": "gguf", "gguf_file": "x.gguf"}, "'models.m.gguf_file': file 'x.gguf' does not exist"),
    ("tasks.boolq", {"source": "local"}, "'tasks.boolq.files.validation': required for source 'local'"),
    ("tasks.boolq", {"source": "local", "files": {"validation": "b.jsonl"}}, "file 'b.jsonl' does not exist"),
    ("tasks.boolq", {"source": "local", "files": {"validation": "b.txt"}}, "must end in one of"),
    ("models.m", {"source": "tiny-random", "tiny": {"hidden": 30, "heads": 4}}, "divisible by heads"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_one_clear_line(path, value, message, tmp_path):
    with pytest.raises(ConfigError) as error:
        check(with_change(path, value), tmp_path)
    text = str(error.value)
    assert message in text
    assert "\n" not in text
    assert text.startswith("config key")


def test_unknown_task_names_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"\['wikitext', 'hellaswag', 'boolq'\]"):
        check(with_change("tasks.hellaswog", {"source": "standin"}))


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_study(tmp_path / "nope.yaml")


def test_local_files_resolve_against_base_dir(tmp_path):
    (tmp_path / "b.jsonl").write_text('{"question": "q", "answer": true, "passage": "p"}\n')
    config = with_change("tasks.boolq", {"source": "local", "files": {"validation": "b.jsonl"}})
    assert check(config, tmp_path)["tasks"]["boolq"]["files"]["validation"] == "b.jsonl"


def test_yaml_round_trip_of_defaults_is_stable():
    config = check(GOOD)
    assert check(yaml.safe_load(yaml.safe_dump(config))) == config


def test_nested_command_line_values_are_read_as_the_schema_says():
    """`--config 'finetune={"cards": [8]}'` hands nested values over as strings."""
    config = with_change("finetune", {"enabled": "true", "cards": ["2"], "max_samples": "null"})
    config["evaluation"] = {"block_size": "64", "dtype": "bfloat16"}
    checked = check(config)
    assert checked["finetune"]["enabled"] is True and checked["finetune"]["cards"] == [2]
    assert checked["finetune"]["max_samples"] is None
    assert (
        checked["evaluation"]["block_size"] == 64 and checked["evaluation"]["dtype"] == "bfloat16"
    )
    with pytest.raises(ConfigError, match=r"'finetune.cards.0': expected integer, got str 'two'"):
        check(with_change("finetune", {"cards": ["two"]}))


def dry_run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-n", *args]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("args", "expected"),
    [  # (command line, what the plan must show)
        # on top of the default study
        (
            [
                "--config",
                "system=cpu-bf16",
                'evaluation={"dtype": "bfloat16"}',
                'diffusion={"dtype": "bfloat16"}',
            ],
            "cpu-bf16",
        ),
        (["--config", 'finetune={"cards": [1], "max_steps": 2}'], "max_steps"),
        (["--configfile", "study.yaml"], "models/only"),  # replaces the default study
    ],
)
def test_config_on_the_command_line_as_snakemake_users_expect(tmp_path, args, expected):
    study = {"study": "own", "models": {"only": {"source": "tiny-random"}},
             "tasks": {"boolq": {"source": "standin", "limit": 2}}}  # fmt: skip
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    result = dry_run(tmp_path, "--printshellcmds", *args)
    assert result.returncode == 0, result.stderr[-2000:]
    plan = result.stdout
    if args[0] == "--configfile":
        assert "models/only" in plan and "smollm" not in plan  # no merge with the default
        assert "\nrule prepare_model:" in plan  # a tiny random model
    else:  # the default study's GGUF (a batch job under a profile: tests/test_profiles.py)
        assert "\nrule convert_gguf:" in plan and "\nrule prepare_model:" not in plan
    if "system=" in args[1]:
        assert "--system cpu-bf16" in plan and "smollm" in plan
    elif args[0] != "--configfile":
        assert '\\"max_steps\\": 2' in plan or '"max_steps": 2' in plan
