"""Config validation: defaults are filled; each kind of bad input is one clear line."""

from __future__ import annotations

import copy

import pytest
import yaml
from accelstudy.config import ConfigError, load_config, validate_config

from tests.conftest import ROOT

GOOD = {
    "study": "t",
    "models": {"tiny": {"source": "tiny-random"}},
    "tasks": {"boolq": {"source": "standin"}},
}


def check(config: dict, tmp_path=None) -> dict:
    return validate_config(copy.deepcopy(config), base_dir=tmp_path)


def test_defaults_are_filled():
    config = check(GOOD)
    assert config["system"] == "cpu"
    assert config["evaluation"]["block_size"] == 512
    assert config["tasks"]["boolq"]["protocols"] == ["paper"]
    assert config["tasks"]["boolq"]["dataset"] == "google/boolq"
    assert config["tasks"]["boolq"]["eval_split"] == "validation"
    assert config["models"]["tiny"]["tiny"]["layers"] == 4


@pytest.mark.parametrize("path", ["config/config.yaml", "config/paper.yaml"])
def test_shipped_configs_are_valid(path):
    assert load_config(ROOT / path)["study"]


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
        load_config(tmp_path / "nope.yaml")


def test_local_files_resolve_against_base_dir(tmp_path):
    (tmp_path / "b.jsonl").write_text('{"question": "q", "answer": true, "passage": "p"}\n')
    config = with_change("tasks.boolq", {"source": "local", "files": {"validation": "b.jsonl"}})
    assert check(config, tmp_path)["tasks"]["boolq"]["files"]["validation"] == "b.jsonl"


def test_yaml_round_trip_of_defaults_is_stable():
    config = check(GOOD)
    assert check(yaml.safe_load(yaml.safe_dump(config))) == config
