"""Where a prepared model's files are, and what names them. The `prepare-model` stage writes
results/models/<name>/manifest.json and loads no weights for models that need no converting:
a Hub model is a snapshot in the user's HF_HOME (downloaded there, only what a job loads, or
found under HF_HUB_OFFLINE=1), a local directory is used in place. Only models that must be
converted (the GGUF, the tiny random Llama) are written out, in FP32, beside the manifest.

Digests: a Hub file's is the one the Hub gives it (sha256 for LFS files, git's sha1 for the
rest), read from the cache's blob names, so nothing is hashed. A local directory's files are
hashed with sha256 once (one read of the directory: about 2 minutes per 140 GB at 1.2 GB/s),
and a later prepare reuses each digest whose file has the same size and mtime."""

import hashlib
import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any

from accelstudy.errors import StudyError
from accelstudy.files import sha256_file, write_json

log = logging.getLogger("accelstudy")
MANIFEST = "manifest.json"
# what a job loads from a snapshot: safetensors weights, configs, tokenizer files; not the
# original/*.pth or *.bin copies some repos also ship
SNAPSHOT_FILES = ["*.safetensors", "*.json", "tokenizer*", "*.model", "*.txt", "*.tiktoken"]
SNAPSHOT_SKIP = ["original/*"]
COMMIT = re.compile(r"[0-9a-f]{40}")
# safetensors dtype names -> bytes per element
DTYPE_BYTES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "U8": 1}
DTYPE_BYTES |= {"I8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class ModelSourceError(StudyError, ValueError):
    """A model that cannot be what the config says it is, or cannot be found."""


def hub_snapshot(name: str, spec: dict[str, Any]) -> Path:
    """The snapshot folder (named by its commit) of the Hub model `spec` names, with only
    SNAPSHOT_FILES: downloaded into the cache, or found there under HF_HUB_OFFLINE=1."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub import errors as hub

    repo, revision = spec["id"], spec.get("revision") or "main"
    what = f"models.{name}: '{repo}' at revision '{revision}'"
    try:
        only = {"allow_patterns": SNAPSHOT_FILES, "ignore_patterns": SNAPSHOT_SKIP}
        return Path(snapshot_download(repo, revision=revision, **only))
    except hub.GatedRepoError:
        fix = "accept its licence on its Hub page, then `hf auth login` or set HF_TOKEN"
        raise ModelSourceError(f"{what} is gated: {fix}") from None
    except hub.RepositoryNotFoundError:
        fix = f"check models.{name}.id (org/name), or set HF_TOKEN for a private repo"
        raise ModelSourceError(f"{what}: no such repository; {fix}") from None
    except hub.RevisionNotFoundError:
        fix = f"set models.{name}.revision to a branch, tag or commit of that repo"
        raise ModelSourceError(f"{what}: no such revision; {fix}") from None
    except hub.LocalEntryNotFoundError:
        fix = f"run `hf download {repo} --revision {revision}` where there is network, with "
        fix += "the same HF_HOME"
        why = "and HF_HUB_OFFLINE=1 or no network kept the Hub out"
        where = constants.HF_HUB_CACHE
        raise ModelSourceError(f"{what} is not in the cache {where}, {why}: {fix}") from None


def hub_commit(repo: str, revision: str, kind: str = "model") -> str | None:
    """The commit a Hub revision names: itself if a commit, else the cache's ref (as
    huggingface_hub and datasets leave it), else the Hub's answer; None offline without a ref."""
    from huggingface_hub import HfApi, constants

    if COMMIT.fullmatch(revision):
        return revision
    ref = Path(constants.HF_HUB_CACHE) / f"{kind}s--{repo.replace('/', '--')}" / "refs" / revision
    if ref.is_file():
        return ref.read_text().strip()
    if constants.HF_HUB_OFFLINE:
        return None
    return getattr(HfApi(), f"{kind}_info")(repo, revision=revision).sha


def safetensors_headers(folder: Path) -> dict[str, tuple[int, dict]]:
    """file name -> (header bytes, header) of each *.safetensors file: read, not loaded."""
    headers = {}
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            headers[path.name] = (size, json.loads(handle.read(size)))
    return headers


def fp32_bytes(folder: Path) -> int:
    """The model's size as FP32 safetensors (the compression ratio's reference): equal to the
    files' size for an FP32 copy, computed from the headers for a BF16 snapshot."""
    total = 0
    for size, header in safetensors_headers(folder).values():
        shapes = [t["shape"] for key, t in header.items() if key != "__metadata__"]
        total += 8 + size + 4 * sum(math.prod(shape) for shape in shapes)
    return total


def _hub_files(folder: Path) -> dict[str, dict[str, Any]]:
    """name -> bytes and the Hub's digest, from the cache's blob names (a blob is named by its
    etag: the sha256 of an LFS file, the git sha1 of any other)."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        blob = Path(os.readlink(path)).name if path.is_symlink() else ""
        scheme = "sha256" if len(blob) == 64 else "git-sha1"
        digest = f"{scheme}:{blob}" if blob else f"sha256:{sha256_file(path)}"
        name = path.relative_to(folder).as_posix()
        files[name] = {"bytes": path.stat().st_size, "digest": digest}
    return files


def _local_files(folder: Path, before: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> bytes, mtime and sha256, reusing `before`'s digest where size and mtime match."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name, stat = path.relative_to(folder).as_posix(), path.stat()
        seen = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        old = before.get(name, {})
        same = all(old.get(k) == v for k, v in seen.items())
        files[name] = {**seen, "digest": old["digest"] if same else f"sha256:{sha256_file(path)}"}
    return files


def _digest(files: dict[str, dict[str, Any]]) -> str:
    """One digest over every file's name and digest (sorted): the directory's."""
    lines = "".join(f"{name} {entry['digest']}\n" for name, entry in sorted(files.items()))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def read_manifest(model_dir: Path) -> dict[str, Any]:
    """The manifest `prepare-model` wrote; a directory without one (saved by hand or by a
    test) is a local model used in place."""
    path = Path(model_dir) / MANIFEST
    if path.is_file():
        return json.loads(path.read_text())
    files = _local_files(Path(model_dir), {})
    return {"source": "local", "path": str(model_dir), "digest": _digest(files), "files": files}


def weights_dir(model_dir: Path) -> Path:
    """Where a prepared model's weights, config and tokenizer are: the snapshot or local
    directory its manifest names, or the prepared directory itself for a converted model."""
    path = Path(model_dir) / MANIFEST
    location = json.loads(path.read_text()).get("path") if path.is_file() else None
    return Path(location) if location else Path(model_dir)


def identity(model_dir: Path) -> dict[str, Any]:
    """What names the model in a record (and for `compare`): the manifest but its files and
    where they are on this machine."""
    manifest = read_manifest(model_dir)
    return {k: v for k, v in manifest.items() if k not in ("files", "path")}


def _dtypes(folder: Path) -> list[str]:
    headers = [header for _, header in safetensors_headers(folder).values()]
    return sorted({t["dtype"] for h in headers for k, t in h.items() if k != "__metadata__"})


def check_causal_lm(name: str, folder: Path) -> None:
    """A model's config.json names a *ForCausalLM (read, nothing loaded), as jobs need."""
    path = folder / "config.json"
    if not path.is_file():
        raise ModelSourceError(f"models.{name}: '{folder}' holds no config.json")
    architectures = json.loads(path.read_text()).get("architectures") or []
    if not any(a.endswith("ForCausalLM") for a in architectures):
        problem = f"has architectures {architectures}; expected a *ForCausalLM"
        raise ModelSourceError(f"models.{name}: '{folder}' {problem}")


def prepare_model(spec: dict[str, Any], out: Path, seed: int = 0) -> dict[str, Any]:
    """The `prepare-model` stage: find (Hub, local) or convert (GGUF, tiny random) the model;
    write its manifest into `out` last, so a present manifest means a prepared model."""
    out, source = Path(out), spec["source"]
    manifest: dict[str, Any] = {"source": source}
    if source == "hf":
        folder = hub_snapshot(out.name, spec)
        check_causal_lm(out.name, folder)
        commit = folder.name if COMMIT.fullmatch(folder.name) else None
        manifest |= {"id": spec["id"], "revision": spec.get("revision") or "main"}
        manifest |= {"commit": commit, "path": str(folder), "files": _hub_files(folder)}
    elif source == "local":
        folder = (Path.cwd() / spec["path"]).resolve()
        check_causal_lm(out.name, folder)
        before = read_manifest(out)["files"] if (out / MANIFEST).is_file() else {}
        files = _local_files(folder, before)
        manifest |= {"path": str(folder), "digest": _digest(files), "files": files}
    else:
        from accelstudy.models import convert

        manifest |= convert(spec, out, seed)
        folder = out
    manifest["dtype_on_disk"] = _dtypes(folder)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / MANIFEST, manifest)
    log.info("prepared model %s: %s", out.name, {k: manifest.get(k) for k in ("id", "commit")})
    return manifest
