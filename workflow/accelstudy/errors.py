"""One base class for every error a user can fix: the CLI prints it as one line, no traceback."""

from collections.abc import Sequence
from typing import Any

from jsonschema import ValidationError

NAME_CHARACTERS = "names may use letters, digits, '_', '.', '-'"


class StudyError(Exception):
    """A problem phrased as one line naming what is at fault and the fix."""


class ConfigError(StudyError, ValueError):
    """A configuration problem: names the config key and what is expected."""


def key_error(key: str, problem: str) -> ConfigError:
    return ConfigError(f"config key '{key}': {problem}")


def require(holds: bool, key: str, problem: str) -> None:
    """Raise key_error(key, problem) unless the check `holds`."""
    if not holds:
        raise key_error(key, problem)


def schema_error(errors: Sequence[ValidationError], where: str = "config key") -> ConfigError:
    """A schema's errors as one line: the deepest names the most specific key."""
    error = max(errors, key=lambda e: len(list(e.absolute_path)))
    while error.validator == "oneOf" and error.context:  # a branch that reached further in
        deeper = max(error.context, key=lambda e: len(list(e.absolute_path)))
        if len(deeper.absolute_path) <= len(error.absolute_path):
            break
        error = deeper
    key = ".".join(str(p) for p in error.absolute_path) or "<top level>"
    kind, why = error.validator, error.message
    value: Any = error.instance
    schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
    if kind == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        why = f"unknown key(s) {sorted(set(value) - set(allowed))}; allowed keys are {allowed}"
    elif kind == "propertyNames":
        names = schema.get("propertyNames", {})
        why += "; " + (f"expected one of {names['enum']}" if "enum" in names else NAME_CHARACTERS)
    elif kind == "enum":
        why = f"{value!r} is not one of {error.validator_value}"
    elif kind == "type":
        why = f"expected {error.validator_value}, got {type(value).__name__} {value!r}"
    elif kind == "oneOf" and "description" in schema:
        why = f"{value!r} is not valid; expected {schema['description']}"
    return ConfigError(f"{where} '{key}': {why}")
