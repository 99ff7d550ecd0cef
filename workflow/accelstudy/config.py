"""Check a study configuration before any job runs: every failure is one line naming the key at
fault and what is expected, so a user can fix the YAML without reading a traceback."""

import contextlib
import fnmatch
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema

from accelstudy.errors import key_error, require, schema_error
from accelstudy.files import read_yaml
from accelstudy.options import schema
from accelstudy.paths import PROJECT_ROOT, RESOURCES
from accelstudy.recipes import RECIPES
from accelstudy.tasks import TASKS


def _with_defaults(validator_class: Any) -> Any:
    """A jsonschema validator that fills in `default` values while validating."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema) -> Iterator:
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = json.loads(json.dumps(sub["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _coerce(value: Any, node: dict[str, Any], defs: dict[str, Any]) -> Any:
    """`--config` values nested in a mapping arrive as strings ('8'); read them as the schema's
    numbers, booleans and nulls, so they mean what they would in the YAML."""
    node = defs[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
    if isinstance(value, dict):
        props, rest = node.get("properties", {}), node.get("additionalProperties")
        rest = rest if isinstance(rest, dict) else {}
        return {k: _coerce(v, props.get(k, rest), defs) for k, v in value.items()}
    if isinstance(value, list):
        return [_coerce(v, node.get("items", {}), defs) for v in value]
    if not isinstance(value, str):
        return value
    types = node.get("type", [])
    readings: dict[str, dict[str, Any]] = {"null": {"null": None}}
    readings["boolean"] = {"true": True, "false": False}
    for kind in [types] if isinstance(types, str) else types:
        if value in readings.get(kind, {}):
            return readings[kind][value]
        with contextlib.suppress(KeyError, ValueError):
            return {"integer": int, "number": float, "string": str}[kind](value)
    return value


NAME_MAX = 200  # a study's name is a folder (and a prefix of logs' names): under Linux's 255 bytes


def validate_config(config: dict[str, Any], base_dir: Path | None = None) -> dict[str, Any]:
    """Validate `config` in place, filling defaults, or raise ConfigError (then: validate_study)."""
    schema_ = schema()
    config.update(_coerce(config, schema_, schema_.get("$defs", {})))
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema_)
    if errors := list(validator.iter_errors(config)):
        raise schema_error(errors)
    base = base_dir or Path.cwd()
    long = f"is {len(config['study'].encode())} bytes, past a file name's {NAME_MAX}; shorten it"
    require(len(config["study"].encode()) <= NAME_MAX, "study", long)
    _check_results_dir(config["results_dir"], base)
    for name, model in config["models"].items():
        _check_model(name, model, base)
    for name, task in config["tasks"].items():
        _check_task(name, task, base)
    _check_ptq(config)
    return config


def read_config(path: str | Path) -> dict[str, Any]:
    """A study file, checked against the schema alone (study.load_study checks its system too)."""
    return validate_config(read_yaml(path))


def _check_ptq(config: dict[str, Any]) -> None:
    ptq = config["ptq"]
    if not ptq["enabled"]:
        return
    for task in ptq["tasks"]:
        unknown = f"task '{task}' is not configured under 'tasks'"
        require(task in config["tasks"], "ptq.tasks", unknown)
    for i, bits in enumerate(ptq["bit_lists"]):
        median = f"the median split needs exactly two precisions (e.g. [16, 8]), got {bits}"
        require(ptq["clustering"] != "median" or len(bits) == 2, f"ptq.bit_lists.{i}", median)
        for model_name, model in config["models"].items():
            tiny = model.get("tiny", {}) if model["source"] == "tiny-random" else {}
            layers = tiny.get("layers")
            fewer = f"{len(bits)} clusters but model '{model_name}' has only {layers} layers"
            require(layers is None or len(bits) <= layers, f"ptq.bit_lists.{i}", fewer)
        for recipe in (RECIPES[name] for name in ptq["recipes"]):
            odd, name = sorted(set(bits) - set(recipe.widths or bits)), recipe.name
            problem = f"recipe '{name}' stores {list(recipe.widths)} bits only: {odd} would be "
            problem += f"stored at another width while the record says {odd}; use those widths"
            require(not odd, f"ptq.bit_lists.{i}", f"{problem} or drop '{name}' from ptq.recipes")


def _check_results_dir(results_dir: str, base: Path) -> None:
    """Results inside the source tree would mix outputs with tracked files: the repository root
    and its folders git does not ignore are refused (results/, the default, is ignored)."""
    root, results = PROJECT_ROOT, (base / results_dir).resolve()
    odd = [f"{ord(c):#04x}" for c in results_dir if ord(c) < 32 or ord(c) == 127]
    require(not odd, "results_dir", f"holds control characters {odd}; name a plain folder")
    require(
        results != Path(results.anchor), "results_dir", "is the file system's root; name a folder"
    )
    exists = f"'{results_dir}' is a file, not a folder; name a folder (or move the file)"
    require(results.is_dir() or not results.exists(), "results_dir", exists)
    nearest = next(p for p in (results, *results.parents) if p.exists())
    require(nearest.is_dir(), "results_dir", f"'{nearest}' is a file, not a folder; name a folder")
    problem = f"'{results_dir}': '{nearest}' is not writable here; name a folder you can write"
    require(os.access(nearest, os.W_OK | os.X_OK), "results_dir", problem)
    if not (root / "Snakefile").is_file():  # an installed package: no source tree here
        return
    ignore = root / ".gitignore"
    ignored = [p.strip("/") for p in ignore.read_text().split()] if ignore.is_file() else []
    folders = [d for d in root.iterdir() if d.is_dir() and d.name != "results"
               and not any(fnmatch.fnmatch(d.name, p) for p in ignored)]  # fmt: skip
    inside = results == root or any(results.is_relative_to(d) for d in folders)
    problem = f"'{results_dir}' is inside this repository's source ({root}); use results (the "
    require(not inside, "results_dir", problem + "default, which git ignores) or a folder outside")


def random_config(reference: str, base: Path) -> Path | None:
    """A `source: random` model's config.json: resources/models/<reference>/, else `reference`
    relative to `base`, a config.json or a folder holding one; None where none is."""
    named, given = RESOURCES / "models" / reference / "config.json", base / reference
    found = (c for c in (named, given, given / "config.json") if c.is_file())
    return next(found, None)


def _check_model(name: str, model: dict[str, Any], base: Path) -> None:
    source, key = model["source"], f"models.{name}"
    needed = {"hf": "id", "local": "path", "gguf": "gguf_file", "random": "config"}.get(source)
    require(not needed or needed in model, f"{key}.{needed}", f"required when source is '{source}'")
    if source == "local":
        path = model["path"]
        problem = f"directory '{path}' does not exist; give a saved Hugging Face model directory"
        require((base / path).is_dir(), f"{key}.path", problem)
    gguf = model.get("gguf_file") or ""
    if source == "gguf" and gguf != "embedded":
        problem = f"file '{gguf}' does not exist; give a .gguf path or 'embedded'"
        require((base / gguf).is_file(), f"{key}.gguf_file", problem)
    if source == "random":
        given, shipped = model["config"], sorted(p.name for p in (RESOURCES / "models").iterdir())
        problem = f"'{given}' is neither a shipped model ({shipped}) nor a config.json or a "
        found = random_config(given, base)
        if found is None:
            raise key_error(f"{key}.config", problem + "folder with one")
        _check_random_config(found, f"{key}.config")
    if source == "tiny-random":
        tiny = model["tiny"]
        for size, by in [("hidden", "heads"), ("heads", "kv_heads")]:
            require(not tiny[size] % tiny[by], f"{key}.tiny.{size}", f"must be divisible by {by}")
        per_head = tiny["hidden"] // tiny["heads"]
        rope = f"{per_head} per head (hidden / heads), but RoPE needs an even number"
        require(not per_head % 2, f"{key}.tiny.hidden", rope)


# a random-weight model's sizes, under the names transformers' configs give them (any present
# must be a positive integer; one of each required group must be present)
SIZES = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "head_dim",
    "n_embd",
    "n_layer",
    "n_head",
    "d_model",
)
REQUIRED_SIZES = (("vocab_size",), ("hidden_size", "n_embd", "d_model"),
                  ("num_hidden_layers", "n_layer"), ("num_attention_heads", "n_head"))  # fmt: skip


def _check_random_config(path: Path, key: str) -> None:
    """A random-weight model's config.json, read as each job would build from it: JSON, a
    model_type, its sizes present, positive and consistent (heads divide the width)."""
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise key_error(key, f"'{path}' is not valid JSON ({error}); fix the file") from None
    require(isinstance(config, dict), key, f"'{path}' is not a JSON object of config fields")
    require(isinstance(config.get("model_type"), str), key, f"'{path}' names no model_type")
    for field in (f for f in SIZES if f in config):
        value, why = config[field], f"'{path}': {field} {config[field]!r} must be a whole number"
        require(isinstance(value, int) and not isinstance(value, bool) and value > 0, key,
                f"{why} above 0")  # fmt: skip
    for group in REQUIRED_SIZES:
        require(any(f in config for f in group), key, f"'{path}' lacks {' or '.join(group)}")
    heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
    if heads and kv:
        require(
            not heads % kv, key, f"'{path}': {heads} heads do not group over {kv} key/value heads"
        )
    if heads and "hidden_size" in config and "head_dim" not in config:
        width = config["hidden_size"]
        require(
            not width % heads,
            key,
            f"'{path}': hidden_size {width} does not split over {heads} heads",
        )


def _check_task(name: str, task: dict[str, Any], base: Path) -> None:
    spec = TASKS[name]
    task.setdefault("dataset", spec.dataset)
    task.setdefault("name", spec.config)
    task.setdefault("eval_split", spec.eval_split)
    if task["source"] != "local":
        return
    files, split = task.get("files") or {}, task["eval_split"]
    problem = "required for source 'local' (the evaluation split's file)"
    require(split in files, f"tasks.{name}.files.{split}", problem)
    suffixes = (".jsonl", ".json", ".parquet", ".csv")
    for split, file in files.items():
        path, key = base / file, f"tasks.{name}.files.{split}"
        require(path.suffix in suffixes, key, f"'{file}' must end in one of {suffixes}")
        what = "is not a regular file (a folder, a pipe)" if path.exists() else "does not exist"
        require(path.is_file(), key, f"file '{file}' {what}; give the split's rows in a file")


def config_hash(config: Mapping[str, Any]) -> str:
    """A stable short hash of a (sub-)configuration, for provenance."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
