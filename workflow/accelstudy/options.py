"""Each option's name, type, default and allowed values live in one place, the config schema
(workflow/schemas/config.schema.yaml): the CLI's flags, the sweep points' and jobs' defaults and
the rules (through the validated config) all read them here, so a default is one schema line."""

import json
from functools import cache
from typing import Any

import yaml

from accelstudy.paths import SCHEMAS, require_project_files
from accelstudy.pruning import FAMILIES, GRANULARITIES
from accelstudy.recipes import RECIPES
from accelstudy.strategies import STRATEGIES
from accelstudy.tasks import PROTOCOLS, TASKS


def _schema() -> dict[str, Any]:
    """Built once per set of registered names: one added later (a plugin whose own imports read
    the schema before it registered, a test's) rebuilds it."""
    return _schema_of(tuple(TASKS), tuple(PROTOCOLS), tuple(RECIPES), tuple(STRATEGIES))


@cache
def _schema_of(*registered: tuple[str, ...]) -> dict[str, Any]:
    require_project_files()  # read on import (the points' defaults): say where it looked
    loaded = yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text())
    ptq, names = loaded["properties"]["ptq"]["properties"], {"enum": list(TASKS)}
    loaded["properties"]["tasks"]["propertyNames"] = ptq["tasks"]["items"] = names
    loaded["$defs"]["task"]["properties"]["protocols"]["items"] = {"enum": list(PROTOCOLS)}
    ptq["recipes"]["items"] = {"enum": list(RECIPES)}
    ptq["granularity"]["enum"], ptq["family"]["enum"] = list(GRANULARITIES), list(FAMILIES)
    strategies = loaded["properties"]["finetune"]["properties"]["strategies"]
    strategies["items"], strategies["default"] = {"enum": list(STRATEGIES)}, list(STRATEGIES)
    ptq["calibration_limit"]["properties"] = {
        name: {"type": ["integer", "null"], "minimum": 1, "default": spec.calibration_limit}
        for name, spec in TASKS.items()
    }
    evaluation = loaded["properties"]["evaluation"]["properties"]
    for name, spec in TASKS.items():  # the paper protocol's length per multiple-choice task
        if spec.max_length is not None:
            paper = {"type": "integer", "minimum": 16, "default": spec.max_length}
            evaluation[f"{name}_max_length"] = paper
    per_task = {"enum": ["last", "first"], "default": "last"}
    ptq["remainder"]["oneOf"][1]["properties"] = dict.fromkeys(TASKS, per_task)
    return loaded


def schema() -> dict[str, Any]:
    """The config schema, its names from the registries of tasks, recipes, strategies and pruning
    targets (a copy: validation fills it)."""
    return json.loads(json.dumps(_schema()))


def node(path: str) -> dict[str, Any]:
    """The schema of one option, by its config path ("ptq.fp8_format", "tasks.*.limit")."""
    full = _schema()
    found: dict[str, Any] = full
    for key in path.split("."):
        if "$ref" in found:
            found = full["$defs"][found["$ref"].rsplit("/", 1)[1]]
        found = found["additionalProperties"] if key == "*" else found["properties"][key]
    return full["$defs"][found["$ref"].rsplit("/", 1)[1]] if "$ref" in found else found


def filled(schema_node: dict[str, Any], value: Any) -> Any:
    """`value` with every default of `schema_node` it lacks, nested objects too."""
    if not isinstance(value, dict) or "properties" not in schema_node:
        return value
    out = dict(value)
    for key, sub in schema_node["properties"].items():
        if key in out:
            out[key] = filled(sub, out[key])
        elif "default" in sub:
            out[key] = filled(sub, json.loads(json.dumps(sub["default"])))
    return out


def default(path: str) -> Any:
    """An option's default, with the defaults inside it where it is a block."""
    spec = node(path)
    return filled(spec, json.loads(json.dumps(spec.get("default"))))


def _boolean(text: str) -> bool:
    return {"true": True, "false": False}[text.lower()]


def _optional_int(text: str) -> int | None:
    return None if text in {"None", "null", ""} else int(text)


def argument(path: str) -> dict[str, Any]:
    """argparse keywords for an option: its type, default, allowed values and description."""
    spec = node(path)
    kind = spec.get("type")
    readers = {"integer": int, "number": float, "boolean": _boolean, "string": str}
    readers |= dict.fromkeys(["array", "object"], json.loads)
    keywords: dict[str, Any] = {"default": default(path), "help": spec.get("description")}
    if "enum" in spec:
        keywords["choices"] = spec["enum"]
    elif kind == ["integer", "null"]:
        keywords["type"] = _optional_int
    elif isinstance(kind, str) and kind in readers:
        keywords["type"] = readers[kind]
    return keywords
