"""One base class for every error a user can fix: the CLI prints it as one line, no traceback."""


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
