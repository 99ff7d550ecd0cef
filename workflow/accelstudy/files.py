"""Atomic file writes (a temporary sibling renamed into place, so a killed job never leaves a
file a re-run would take as done, with the modes open()/mkdir() would give) and file digests."""

import contextlib
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from accelstudy.errors import ConfigError, StudyError

MOST_YAML_NODES = 100_000  # a study or system file's nodes with aliases expanded (the paper's
# study: under 2,000); nested aliases ("billion laughs") expand past it without being built


def current_umask() -> int:
    """This process's umask, read from /proc (setting it to read it, the fallback, is
    process-wide: not safe beside the energy meter's threads)."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umask_mode(path: str | Path, directory: bool = False) -> None:
    """Give `path` the mode `open()` / `mkdir()` would (mkstemp and mkdtemp create 0600 / 0700,
    which would hide results from the group a project directory is shared with), but never
    group- or world-writable: a record another user could rewrite is no evidence."""
    os.chmod(path, (0o777 if directory else 0o666) & ~(current_umask() | 0o022))


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary sibling of `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask_mode(tmp)
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(out: Path) -> Iterator[Path]:
    """A temporary sibling folder to fill; it replaces `out` only if the block succeeds, its
    files given the umask's modes (mkdtemp's 0700 and safetensors' 0600 otherwise)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        for written in [tmp, *tmp.rglob("*")]:
            umask_mode(written, written.is_dir())
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: str | Path, payload: Any) -> None:
    with atomic_open(path) as handle:
        json.dump(payload, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")


def read_json(path: str | Path) -> Any:
    """A JSON file, or one line naming it and how to make it again (never a bare traceback)."""
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise StudyError(
            f"{path} is not valid JSON ({error}): a damaged copy; delete it and re-run "
            "snakemake, which runs the job that writes it again"
        ) from None


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file, read in blocks (memory stays flat for any size)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (it keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"key '{key}' appears twice (line {key_node.start_mark.line + 1})"
                                  ": keep one")  # fmt: skip
            seen.add(key)
        return super().construct_mapping(node, deep)


def _expanded_nodes(node: yaml.Node, sizes: dict[int, int]) -> int:
    """The node's size with every alias expanded, each shared node sized once (linear time)."""
    if sizes.get(id(node)) == -1:  # entered and not left: the node holds itself
        raise ConfigError(f"an alias at line {node.start_mark.line + 1} holds itself: write it out")
    if id(node) not in sizes:
        sizes[id(node)] = -1
        children = node.value if isinstance(node.value, list) else []
        pairs = [n for item in children for n in (item if isinstance(item, tuple) else (item,))]
        sizes[id(node)] = 1 + sum(_expanded_nodes(child, sizes) for child in pairs)
    return sizes[id(node)]


def _non_finite(value: Any, where: str = "") -> str | None:
    """The first key whose value is a NaN or an infinity, as 'a.b.0', else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "<top level>"
    items: list[tuple[Any, Any]] = list(value.items()) if isinstance(value, dict) else []
    items = list(enumerate(value)) if isinstance(value, list) else items
    for key, item in items:
        if found := _non_finite(item, f"{where}.{key}" if where else str(key)):
            return found
    return None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A study or system file as a mapping, or one line naming the file and its fault: not YAML,
    a key twice, aliases that expand past MOST_YAML_NODES, a NaN or infinity, not a mapping."""
    path = Path(path)
    if not path.is_file():  # a folder, a FIFO (which would block the read), nothing
        problem = "is not a regular file" if path.exists() else "does not exist"
        raise ConfigError(f"config file '{path}' {problem}: give a study or system YAML file")
    try:
        loader = _StrictLoader(path.read_text())
        try:
            node = loader.get_single_node()
            if node is not None and _expanded_nodes(node, {}) > MOST_YAML_NODES:
                raise ConfigError(
                    f"its aliases expand past {MOST_YAML_NODES:,} nodes: write it out"
                )
            spec = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{at}: {problem}") from None
    except (ConfigError, UnicodeDecodeError, IsADirectoryError) as error:
        raise ConfigError(f"{path}: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deep to be a study: write it flatter") from None
    spec = {} if spec is None else spec
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: expected a mapping of keys, got {type(spec).__name__}")
    if key := _non_finite(spec):
        raise ConfigError(f"{path}: key '{key}' is not a finite number: give a number")
    return spec
