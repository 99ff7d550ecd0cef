"""Atomic file writes (a temporary sibling renamed into place, so a killed job never leaves a
file a re-run would take as done, with the modes open()/mkdir() would give) and file digests."""

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from accelstudy.errors import StudyError


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
