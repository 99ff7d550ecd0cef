"""The result record every job writes: what ran, its metrics and its provenance, validated
against workflow/schemas/record.schema.yaml and written atomically."""

import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any, Self

import jsonschema
import yaml

from accelstudy import __version__, peak, timeline
from accelstudy.config import config_hash
from accelstudy.cost import Allocation, allocation, charged
from accelstudy.energy import EnergyMeter, combine, per_unit
from accelstudy.files import read_json, write_json
from accelstudy.kinds import KINDS
from accelstudy.paths import CHECKOUT, MARKER, SCHEMAS
from accelstudy.systems import System, load_system
from accelstudy.tasks import PROTOCOLS

SCHEMA_VERSION = 2  # bump when a record's fields change meaning; `compare` matches only this one
VERSIONED_PACKAGES = (  # noqa: SIM905 (a list of names, one line)
    "torch transformers datasets numpy snakemake lm_eval peft accelerate deepspeed optimum_habana "
    "habana_torch_plugin diffusers pysm3 healpy"
).split()


def _git(*args: str) -> str:
    command = ["git", "-C", str(CHECKOUT), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip()


def _installed_commit() -> str | None:
    """The commit pip noted installing this package from git (`pip install git+URL@rev`: PEP 610's
    direct_url.json); None for a wheel or a folder."""
    try:
        text = metadata.distribution("accelstudy").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    commit = (json.loads(text).get("vcs_info") or {}).get("commit_id") if text else None
    return str(commit) if commit else None


def git_commit() -> str:
    """The commit of the code that ran: its checkout's HEAD (-dirty with local changes). An
    installed package has no checkout (git there would name any repository holding the venv):
    the commit pip noted, else the package's version."""
    if not (CHECKOUT / MARKER).is_file():
        return _installed_commit() or f"accelstudy {__version__}"
    try:
        dirty = _git("status", "--porcelain", "--untracked-files=no")
        return _git("rev-parse", "HEAD") + ("-dirty" if dirty else "")
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


SLURM_VARIABLES = {
    "job_id": "SLURM_JOB_ID",
    "partition": "SLURM_JOB_PARTITION",
    "node": "SLURMD_NODENAME",
    "gpus": "CUDA_VISIBLE_DEVICES",  # as the job sees them (renumbered from 0)
    "job_gpus": "SLURM_JOB_GPUS",  # the node's GPU indices SLURM bound to the job
}


def scheduler_context(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Where the job ran: the SLURM job (to match `scontrol`/`sacct`), a pod, or local."""
    if "SLURM_JOB_ID" in environ:
        found = {key: environ[var] for key, var in SLURM_VARIABLES.items() if var in environ}
        return {"kind": "slurm", **found}
    if "KUBERNETES_SERVICE_HOST" in environ:
        return {"kind": "kubernetes", "pod": environ.get("HOSTNAME", platform.node())}
    return {"kind": "local"}


def provenance(
    config_hash: str, device_name: str, device_kind: str, wall_s: float, clock: Any = None
) -> dict:
    """Where and with what a record was measured; `clock`: its job's timeline (else the one
    running now)."""
    import torch

    node = {"host": platform.node(), "machine": platform.machine(), "cpu_count": os.cpu_count()}
    hardware: dict[str, Any] = {"device_kind": device_kind, "device_name": device_name, **node}
    cpu_model, flags = peak.cpu_model_and_flags()
    hardware |= {"cpu_model": cpu_model, "cpu_flags": sorted(peak.CPU_FLAGS & set(flags))}
    # the kernels torch's CPU ops ran (AVX2, AVX512, ...): a CPU result's last digits follow it
    hardware["cpu_dispatch"] = torch.backends.cpu.get_cpu_capability()
    counts = sorted({1, torch.get_num_threads(), os.cpu_count() or 1})  # the CPU's own limit:
    probes = {n: peak.cpu_rates(n, probe_if_missing=False) for n in counts}  # what is cached
    hardware["cpu_gemm_probe"] = {str(n): p["flops_per_s"] for n, p in probes.items() if p}
    return {
        "git_commit": git_commit(),
        "config_hash": config_hash,
        "versions": package_versions(),
        "hardware": {**hardware, "torch_threads": torch.get_num_threads()},
        "scheduler": scheduler_context(),
        "wall_time_s": round(wall_s, 3),
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "timeline": (clock or timeline.current()).since_start(),
    }


def record_schema() -> dict[str, Any]:
    """record.schema.yaml, its stages (layout.RECORD_STAGES), start-up phases (timeline.STARTUP)
    protocols (tasks.PROTOCOLS) and device kinds (kinds.KINDS) named from the one list of each."""
    from accelstudy.layout import RECORD_STAGES  # here: its sweep points cost 0.1 s to import

    schema = yaml.safe_load((SCHEMAS / "record.schema.yaml").read_text())
    schema["properties"]["protocol"] = {"enum": list(PROTOCOLS)}
    schema["properties"]["device"] = {"enum": list(KINDS)}
    schema["properties"]["stage"] = {"enum": list(RECORD_STAGES)}
    phases = f"^({'|'.join(timeline.STARTUP)})_s$"
    schema["$defs"]["startup"]["patternProperties"] = {phases: {"type": "number", "minimum": 0}}
    return schema


def validate_record(record: dict[str, Any], tolerate: Iterable[str] = ()) -> None:
    """Raise the schema's best error, but none about a key in `tolerate` (a reader's figures
    that it shows as "-": a rate, energy or charge of a record edited by hand)."""
    schema, named = record_schema(), set(tolerate)

    def about_named(error: jsonschema.ValidationError) -> bool:
        missing = error.validator == "required" and any(f"'{k}'" in error.message for k in named)
        return missing or bool(error.absolute_path and error.absolute_path[-1] in named)

    errors = jsonschema.validators.validator_for(schema)(schema).iter_errors(record)
    if (
        error := jsonschema.exceptions.best_match(e for e in errors if not about_named(e))
    ) is not None:
        raise error


def write_record(path: str | Path, record: dict[str, Any]) -> None:
    """Stamp the schema version, validate against record.schema.yaml, write atomically."""
    validate_record(record := {"schema_version": SCHEMA_VERSION, **record})
    write_json(path, record)


@dataclass(kw_only=True)
class Record:
    """What a stage measured; `Job.write` adds where and how it ran. New optional fields need no
    schema bump: the record schema allows fields it does not name."""

    stage: str
    model: str
    task: str
    method: str
    data_source: str
    inputs: dict[str, Any]  # what names the model and data measured
    parameters: dict[str, Any]
    metrics: dict[str, Any]
    protocol: str | None = None  # an evaluation's protocol; a sweep point has none
    hashed: Any = None  # what the config hash is over (default: the parameters)


def after_measurement(compute: Callable[[], dict[str, Any]], **marked: Any) -> dict[str, Any]:
    """A block computed after the measurement: its error lands in the block, not a lost record."""
    try:
        return compute()
    except Exception as error:  # the record outlives any of them
        return {"status": "error", "reason": f"{type(error).__name__}: {error}", **marked}


@dataclass(kw_only=True)
class Job:
    """What every stage's job has: its study, its system, its record's path, its device, and
    the clock its wall time runs on from its making."""

    study: str
    system: System
    out: Path
    device_kind: str = "auto"
    params_digest: str | None = None  # its rule's (targets.measuring_params): written in the record
    started: float = field(init=False, repr=False, default_factory=time.perf_counter)
    meter: Any = field(init=False, repr=False, default=None)  # an in-process job's EnergyMeter
    clock: timeline.Timeline = field(init=False, repr=False)  # its start-up phases and marks
    energy: dict[str, Any] | None = field(init=False, default=None)  # else its ranks' (combined)
    compute: dict[str, Any] = field(init=False, default_factory=dict)  # the dtype that ran, why

    @classmethod
    def from_flags(cls, *, system: str | System, **flags: Any) -> Self:
        """The job of a stage's CLI flags (its system by name)."""
        return cls(system=load_system(system) if isinstance(system, str) else system, **flags)

    def __post_init__(self) -> None:
        self.clock = timeline.begin_job()  # its own, not an earlier job's in this process

    def ranks_and_threads(self) -> tuple[int, int]:
        """What computed: this process's cards (one) or torch threads."""
        import torch

        return 1, torch.get_num_threads()

    def resolve_dtype(self, asked: str, device_kind: str, threads: int | None = None) -> str:
        """The dtype this job computes in (`auto`: accelstudy.peak.resolve_dtype), and why."""
        threads = threads or self.ranks_and_threads()[1]
        dtype, reason = peak.resolve_dtype(asked, self.system, device_kind, threads)
        self.compute = {"dtype": dtype, "reason": reason}
        return dtype

    def utilization(self, rate: float | None, flops_per_unit: float | None) -> dict[str, Any]:
        """Achieved model FLOP/s (accelstudy.flops) beside the peak of what the job held."""
        dtype, reason = self.compute.get("dtype"), self.compute.get("reason", "")
        block = {"dtype": dtype, "dtype_reason": reason, "flops_per_unit": flops_per_unit}
        if dtype is None or not rate or flops_per_unit is None:
            return {**block, "status": "unknown", "source": "no FLOP count or rate", "mfu": None}
        # a system whose card is known only here: the name torch reports picks the table's row
        name = self.device.name() if self.system.peak_flops == peak.BY_NAME else None
        limit = peak.peak(self.system, self.device.kind, dtype, *self.ranks_and_threads(), name)
        return {**block, **peak.utilization(limit, rate * flops_per_unit)}

    def measure_energy(self) -> None:
        """From now on, this process's card (if it drives one) and CPU packages."""
        card, required = None if self.device.spec.host else 0, self.system.energy
        with timeline.phase("device"):  # the card's and packages' counters opened
            self.meter = EnergyMeter(self.device.kind, card, package=True, required=required)

    def allocation(self) -> Allocation:
        """What this job holds: one card where it drives one, its torch threads as cores."""
        return allocation(int(not self.device.spec.host), self.ranks_and_threads()[1])

    @cached_property
    def device(self) -> Any:
        from accelstudy.device import resolve  # torch, only once a job runs

        with timeline.phase("device"):
            return resolve(self.device_kind)

    def write(self, measured: Record) -> dict[str, Any]:
        """Write this job's record (the one writer every stage calls) and return it."""
        record: dict[str, Any] = {"stage": measured.stage, "study": self.study}
        record |= {"system": self.system.name, "device": self.device.kind}
        record |= {k: getattr(measured, k) for k in ("model", "task", "method", "data_source")}
        record |= {"protocol": measured.protocol} if measured.protocol is not None else {}
        record |= {"params_digest": self.params_digest} if self.params_digest else {}
        record |= {k: getattr(measured, k) for k in ("inputs", "parameters", "metrics")}
        wall_s, system, metrics = time.perf_counter() - self.started, self.system, measured.metrics
        unit = "image" if measured.stage == "diffusion" else "token"
        rate = metrics.get(f"{unit}s_per_s")

        def energy() -> dict[str, Any]:
            used = combine([self.meter.stop()]) if self.meter else self.energy
            return per_unit(used or {"status": "unavailable", "reason": "nothing ran"}, rate, unit)

        record["energy"] = after_measurement(energy)
        flops = metrics.get(f"flops_per_{unit}")
        failed = {"source": "its computation failed: see reason", "mfu": None}
        record["utilization"] = after_measurement(lambda: self.utilization(rate, flops), **failed)
        record["cost"] = after_measurement(
            lambda: charged(system.charge, self.allocation(), wall_s / 3600, system.per_node)
        )
        config = config_hash(measured.parameters if measured.hashed is None else measured.hashed)

        def where() -> dict[str, Any]:
            facts = provenance(config, self.device.name(), self.device.kind, wall_s, self.clock)
            return facts | {"system": self.system.facts()}

        record["provenance"] = after_measurement(where, config_hash=config, wall_time_s=wall_s)
        write_record(self.out, record)
        return record


read_record = read_json
