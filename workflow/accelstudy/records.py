"""The result record every job writes, its provenance, and atomic file writes: a temporary
sibling renamed into place, so a killed job never leaves a file a re-run would take as done."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import jsonschema
import yaml

from accelstudy import __version__
from accelstudy.paths import PROJECT_ROOT, SCHEMAS

SCHEMA_VERSION = 1  # bump when a record's fields change meaning; `compare` reads only this one
VERSIONED_PACKAGES = (
    "torch", "transformers", "datasets", "numpy", "snakemake", "lm_eval", "peft", "accelerate",
    "deepspeed", "optimum_habana", "habana_torch_plugin", "diffusers", "pysm3", "healpy",
)  # fmt: skip


def umask_mode(path: str | Path, directory: bool = False) -> None:
    """Give `path` the mode `open()` / `mkdir()` would: mkstemp and mkdtemp create 0600 /
    0700, which would hide results from the group a project directory is shared with."""
    mask = os.umask(0o022)  # the umask is read by setting it, so set it straight back
    os.umask(mask)
    os.chmod(path, (0o777 if directory else 0o666) & ~mask)


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


def write_json(path: str | Path, payload: Any) -> None:
    with atomic_open(path) as handle:
        json.dump(payload, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    """The versions that matter, with CUDA / NCCL where the torch build has them."""
    import torch

    versions = {"accelstudy": __version__, "python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name.replace("_", "-"))
    if torch.version.cuda:
        versions["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):
            versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return versions


def hardware(device_name: str, device_kind: str) -> dict[str, Any]:
    import torch

    return {"device_kind": device_kind, "device_name": device_name, "host": platform.node(),
            "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}  # fmt: skip


# scheduler context -> the variables SLURM's job step sets
SLURM_VARIABLES = {
    "job_id": "SLURM_JOB_ID",
    "partition": "SLURM_JOB_PARTITION",
    "node": "SLURMD_NODENAME",
    "gpus": "CUDA_VISIBLE_DEVICES",  # as the job sees them (renumbered from 0)
    "job_gpus": "SLURM_JOB_GPUS",  # the node's GPU indices SLURM bound to the job
}


def scheduler_context(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Where the job ran: the SLURM job (to match `scontrol`/`sacct`), a pod, or local."""
    environ = dict(os.environ if environ is None else environ)
    if "SLURM_JOB_ID" in environ:
        found = {key: environ[var] for key, var in SLURM_VARIABLES.items() if var in environ}
        return {"kind": "slurm", **found}
    if "KUBERNETES_SERVICE_HOST" in environ:
        return {"kind": "kubernetes", "pod": environ.get("HOSTNAME", platform.node())}
    return {"kind": "local"}


def provenance(config_hash: str, device_name: str, device_kind: str, wall_s: float) -> dict:
    return {
        "git_commit": git_commit(),
        "config_hash": config_hash,
        "versions": package_versions(),
        "hardware": hardware(device_name, device_kind),
        "scheduler": scheduler_context(),
        "wall_time_s": round(wall_s, 3),
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def job_record(*, stage: str, study: str, system: str, device: Any, model: str, task: str,
               method: str, protocol: str | None, data_source: str, parameters: dict[str, Any],
               metrics: dict[str, Any], config_hash: str,
               wall_s: float) -> dict[str, Any]:  # fmt: skip
    """The result record of one job (`device` is an accelstudy.device.Device); stages
    without an evaluation protocol (fine-tuning, diffusion) pass protocol=None."""
    record = {
        "stage": stage, "study": study, "system": system, "device": device.kind,
        "model": model, "task": task, "method": method, "protocol": protocol,
        "data_source": data_source, "parameters": parameters, "metrics": metrics,
        "provenance": provenance(config_hash, device.name(), device.kind, wall_s),
    }  # fmt: skip
    if protocol is None:
        del record["protocol"]
    record["provenance"]["system"] = system_facts(system)
    return record


def system_facts(name: str) -> dict[str, Any]:
    """What the system file says the machine is, so runs that share a name can be checked."""
    from accelstudy.config import load_system

    spec = load_system(name)
    keys = ("device", "accelerator", "memory_per_card_gb", "cards_per_node", "nodes")
    return {key: spec.get(key) for key in keys}


def validate_record(record: dict[str, Any]) -> None:
    schema = yaml.safe_load((SCHEMAS / "record.schema.yaml").read_text())
    jsonschema.validate(record, schema)


def write_record(path: str | Path, record: dict[str, Any]) -> None:
    """Stamp the schema version, validate against workflow/schemas/record.schema.yaml, then
    write atomically."""
    record = {"schema_version": SCHEMA_VERSION, **record}
    validate_record(record)
    write_json(path, record)


def read_record(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
