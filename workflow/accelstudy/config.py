"""Load and check a study configuration before any job runs.

Every failure is one line naming the key at fault and what is expected, so a user can fix the
YAML without reading a traceback."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from accelstudy.paths import SCHEMAS, SYSTEMS

TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "wikitext": {"dataset": "Salesforce/wikitext", "name": "wikitext-2-raw-v1",
                 "eval_split": "test"},
    "hellaswag": {"dataset": "Rowan/hellaswag", "name": None, "eval_split": "validation"},
    "boolq": {"dataset": "google/boolq", "name": None, "eval_split": "validation"},
}  # fmt: skip
MODEL_SOURCE_KEYS = {"hf": "id", "local": "path", "gguf": "gguf_file"}
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


class ConfigError(ValueError):
    """A configuration problem, phrased as one line naming the key and the fix."""


def _key_error(key: str, problem: str) -> ConfigError:
    return ConfigError(f"config key '{key}': {problem}")


def _with_defaults(validator_class: type) -> type:
    """A jsonschema validator that fills in `default` values while validating."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema) -> Iterator:
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = json.loads(json.dumps(sub["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _explain(error: jsonschema.ValidationError) -> str:
    key = ".".join(str(p) for p in error.absolute_path) or "<top level>"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"config key '{key}': unknown key(s) {extra}; allowed keys are {allowed}"
    if error.validator == "propertyNames":
        return f"config key '{key}': {error.message}; {_allowed_names(error)}"
    if error.validator == "enum":
        return f"config key '{key}': {error.instance!r} is not one of {error.validator_value}"
    if error.validator == "type":
        return (
            f"config key '{key}': expected {error.validator_value}, "
            f"got {type(error.instance).__name__} {error.instance!r}"
        )
    if error.validator == "oneOf" and "description" in error.schema:
        expected = error.schema["description"]
        return f"config key '{key}': {error.instance!r} is not valid; expected {expected}"
    return f"config key '{key}': {error.message}"


def _allowed_names(error: jsonschema.ValidationError) -> str:
    names = error.schema.get("propertyNames", {})
    if "enum" in names:
        return f"expected one of {names['enum']}"
    return "names may use letters, digits, '_', '.', '-'"


def validate_config(config: dict[str, Any], base_dir: Path | None = None) -> dict[str, Any]:
    """Validate `config` in place (filling defaults) and return it, or raise ConfigError."""
    schema = yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text())
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = list(validator.iter_errors(config))
    if errors:  # the deepest error names the most specific key
        raise ConfigError(_explain(max(errors, key=lambda e: len(list(e.absolute_path)))))
    base = base_dir or Path.cwd()
    for name, model in config["models"].items():
        _check_model(name, model, base)
    for name, task in config["tasks"].items():
        _check_task(name, task, base)
    _check_ptq(config)
    system = load_system(config["system"])
    from accelstudy.diffusion.points import check_diffusion
    from accelstudy.finetune.sweep import SweepError, check_sweep

    try:
        check_sweep(config, system)
        check_diffusion(config, system)
    except SweepError as exc:
        raise ConfigError(str(exc)) from None
    return config


def _check_ptq(config: dict[str, Any]) -> None:
    ptq = config["ptq"]
    if not ptq["enabled"]:
        return
    for task in ptq["tasks"]:
        if task not in config["tasks"]:
            raise _key_error("ptq.tasks", f"task '{task}' is not configured under 'tasks'")
    for i, bits in enumerate(ptq["bit_lists"]):
        if ptq["clustering"] == "median" and len(bits) != 2:
            raise _key_error(f"ptq.bit_lists.{i}", "the median split needs exactly two "
                             f"precisions (e.g. [16, 8]), got {bits}")  # fmt: skip
        for model_name, model in config["models"].items():
            tiny = model.get("tiny", {}) if model["source"] == "tiny-random" else {}
            layers = tiny.get("layers")
            if layers is not None and len(bits) > layers:
                raise _key_error(f"ptq.bit_lists.{i}", f"{len(bits)} clusters but model "
                                 f"'{model_name}' has only {layers} layers")  # fmt: skip


def _check_model(name: str, model: dict[str, Any], base: Path) -> None:
    source = model["source"]
    needed = MODEL_SOURCE_KEYS.get(source)
    if needed and needed not in model:
        raise _key_error(f"models.{name}.{needed}", f"required when source is '{source}'")
    if source == "local" and not (base / model["path"]).is_dir():
        raise _key_error(f"models.{name}.path", f"directory '{model['path']}' does not exist; "
                         "give a saved Hugging Face model directory")  # fmt: skip
    gguf = model.get("gguf_file")
    if source == "gguf" and gguf != "embedded" and not (base / gguf).is_file():
        raise _key_error(f"models.{name}.gguf_file", f"file '{gguf}' does not exist; "
                         "give a .gguf path or 'embedded'")  # fmt: skip
    tiny = model.get("tiny", {})
    if source == "tiny-random" and tiny["hidden"] % tiny["heads"]:
        raise _key_error(f"models.{name}.tiny.hidden", "must be divisible by heads")
    if source == "tiny-random" and tiny["heads"] % tiny["kv_heads"]:
        raise _key_error(f"models.{name}.tiny.heads", "must be divisible by kv_heads")


def _check_task(name: str, task: dict[str, Any], base: Path) -> None:
    for key, value in TASK_DEFAULTS[name].items():
        task.setdefault(key, value)
    if task["source"] != "local":
        return
    files = task.get("files") or {}
    if task["eval_split"] not in files:
        raise _key_error(f"tasks.{name}.files.{task['eval_split']}",
                         "required for source 'local' (the evaluation split's file)")  # fmt: skip
    for split, file in files.items():
        path, key = base / file, f"tasks.{name}.files.{split}"
        if path.suffix not in LOCAL_SUFFIXES:
            raise _key_error(key, f"'{file}' must end in one of {LOCAL_SUFFIXES}")
        if not path.is_file():
            raise _key_error(key, f"file '{file}' does not exist")


def load_system(name: str) -> dict[str, Any]:
    """The machine description config/systems/{name}.yaml."""
    path = SYSTEMS / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in SYSTEMS.glob("*.yaml"))
        raise _key_error("system", f"unknown system '{name}'; known systems are {known}")
    return yaml.safe_load(path.read_text())


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML study file and validate it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file '{path}' does not exist")
    return validate_config(yaml.safe_load(path.read_text()) or {})


def config_hash(config: Mapping[str, Any]) -> str:
    """A stable short hash of a (sub-)configuration, for provenance."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
