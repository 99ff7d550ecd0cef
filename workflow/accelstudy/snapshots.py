"""Where a prepared model's files are, and what names them: a Hub snapshot in HF_HOME or a local
directory, used in place, or a GGUF or tiny random Llama converted to FP32 beside the manifest.
Digests: a Hub file's is the Hub's, read from the cache's blob names (nothing hashed); a local
file's sha256 is hashed once (about 2 minutes per 140 GB) and reused while size and mtime hold."""

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accelstudy.config import random_config
from accelstudy.errors import StudyError
from accelstudy.files import sha256_file
from accelstudy.layout import StudyLayout
from accelstudy.paths import RESOURCES

MANIFEST = "manifest.json"
# what a job loads from a snapshot; not the original/*.pth or *.bin copies some repos also ship
SNAPSHOT_FILES = ["*.safetensors", "*.json", "tokenizer*", "*.model", "*.txt", "*.tiktoken"]
COMMIT = re.compile(r"[0-9a-f]{40}")


class ModelSourceError(StudyError, ValueError):
    """A model that cannot be what the config says it is, or cannot be found."""


def hub_snapshot(name: str, spec: dict[str, Any]) -> Path:
    """The commit-named snapshot folder of a Hub model with SNAPSHOT_FILES, downloaded or cached."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub import errors as hub

    repo, revision = spec["id"], spec.get("revision") or "main"
    what = f"models.{name}: '{repo}' at revision '{revision}'"
    try:
        folder = snapshot_download(
            repo, revision=revision, allow_patterns=SNAPSHOT_FILES, ignore_patterns=["original/*"]
        )
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
        why, where = "and HF_HUB_OFFLINE=1 or no network kept the Hub out", constants.HF_HUB_CACHE
        raise ModelSourceError(f"{what} is not in the cache {where}, {why}: {fix}") from None
    return Path(folder)


def hub_commit(repo: str, revision: str, kind: str = "model") -> str | None:
    """A Hub revision's commit: itself, the cache's ref, or the Hub's answer (offline: None)."""
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
    """file name -> (header bytes, tensor name -> dtype and shape) of each *.safetensors file."""
    headers = {}
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
        headers[path.name] = (size, {k: t for k, t in header.items() if k != "__metadata__"})
    return headers


def fp32_bytes(folder: Path) -> int:
    """The model's size as FP32 safetensors, from the headers: the compression ratio's reference."""
    headers = safetensors_headers(folder).values()
    return sum(8 + size + 4 * sum(math.prod(t["shape"]) for t in h.values()) for size, h in headers)


def hub_files(folder: Path) -> dict[str, dict[str, Any]]:
    """name -> bytes and digest: a cache blob is named by its etag (LFS: sha256, else git sha1)."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        blob = Path(os.readlink(path)).name if path.is_symlink() else ""
        scheme = "sha256" if len(blob) == 64 else "git-sha1"
        digest = f"{scheme}:{blob}" if blob else f"sha256:{sha256_file(path)}"
        name = path.relative_to(folder).as_posix()
        files[name] = {"bytes": path.stat().st_size, "digest": digest}
    return files


def local_files(folder: Path, before: dict[str, Any]) -> dict[str, Any]:
    """Per file: bytes, mtime, sha256 (`before`'s if size and mtime hold); the directory digest."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name, stat = path.relative_to(folder).as_posix(), path.stat()
        seen, old = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}, before.get(name, {})
        same = all(old.get(k) == v for k, v in seen.items())
        files[name] = {**seen, "digest": old["digest"] if same else f"sha256:{sha256_file(path)}"}
    lines = "".join(f"{name} {entry['digest']}\n" for name, entry in sorted(files.items()))
    return {"digest": "sha256:" + hashlib.sha256(lines.encode()).hexdigest(), "files": files}


def read_manifest(model_dir: Path) -> dict[str, Any]:
    """The manifest `prepare-model` wrote; without one (saved by hand or a test), a local model."""
    path = Path(model_dir) / MANIFEST
    if path.is_file():
        return json.loads(path.read_text())
    return {"source": "local", "path": str(model_dir), **local_files(Path(model_dir), {})}


def weights_dir(model_dir: Path) -> Path:
    """Where the weights, config and tokenizer are: the manifest's path, else `model_dir` itself."""
    path = Path(model_dir) / MANIFEST
    location = json.loads(path.read_text()).get("path") if path.is_file() else None
    return Path(location) if location else Path(model_dir)


def config_folder(study: Mapping[str, Any], model: str) -> Path | None:
    """The folder of a study's model's config.json, as every plan reads it: a `source: random`
    model's named config (its jobs build from it), resources/models/<model> (the paper's
    models, planned offline), else the prepared model's; None before it is prepared."""
    spec = study["models"].get(model, {})
    if spec.get("source") == "random" and (found := random_config(spec["config"], Path.cwd())):
        return found.parent
    prepared = Path(StudyLayout(study, study["system"]).path("prepare_model", model=model))
    for folder in (RESOURCES / "models" / model, weights_dir(prepared)):
        if (folder / "config.json").is_file():
            return folder
    return None


def identity(model_dir: Path) -> dict[str, Any]:
    """What names the model in a record and for `compare`: the manifest but files and path."""
    return {k: v for k, v in read_manifest(model_dir).items() if k not in ("files", "path")}


def check_causal_lm(name: str, folder: Path) -> None:
    """A model's config.json names a *ForCausalLM (read, nothing loaded), as jobs need."""
    path = folder / "config.json"
    if not path.is_file():
        raise ModelSourceError(f"models.{name}: '{folder}' holds no config.json")
    architectures = json.loads(path.read_text()).get("architectures") or []
    if not any(a.endswith("ForCausalLM") for a in architectures):
        problem = f"has architectures {architectures}; expected a *ForCausalLM"
        raise ModelSourceError(f"models.{name}: '{folder}' {problem}")
