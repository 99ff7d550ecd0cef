"""Around every rank's work: rank 0 writes the result; out of memory is one (`does-not-fit`);
any other error writes nothing, so the scheduler's retry starts the point afresh."""

import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any, NoReturn

import torch

from accelstudy import timeline
from accelstudy.device import Device, resolve
from accelstudy.energy import EnergyMeter, EnergySourceError, combine
from accelstudy.files import write_json
from accelstudy.kinds import KINDS
from accelstudy.launch import ENERGY_SOURCES, node_name, rendezvous_port
from accelstudy.points import Point
from accelstudy.records import package_versions, read_record

KILL_HOOK = "ACCELSTUDY_TEST_KILL_AFTER_SAVE"  # "N": dies after step N, as if preempted
Measured = dict[str, Any]  # what one rank's work returns
Summarise = Callable[[list[Measured]], dict[str, Any]]  # every rank's measurements -> the result


def peak_metrics(measured: list[Measured], what_before: str) -> dict[str, Any]:
    """Rank 0's metrics with every rank's peak memory, their largest and how it was measured."""
    first, peaks = measured[0], [m["peak_memory_bytes"] for m in measured]
    on_cpu = f"RSS growth: getrusage ru_maxrss at the end minus the RSS {what_before}"
    method = on_cpu if KINDS[first["device"]].host else "max_memory_allocated"
    metrics = {**first["metrics"], "peak_memory_per_rank": peaks, "peak_memory_bytes": max(peaks)}
    return metrics | {"peak_memory_method": method}


def rank_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """torch.distributed's variables: Open MPI's under mpirun; a 1-process group's alone."""
    environ = os.environ if environ is None else environ
    if "RANK" not in environ and "OMPI_COMM_WORLD_RANK" in environ:
        for ours, mpi in (("RANK", "RANK"), ("WORLD_SIZE", "SIZE"), ("LOCAL_RANK", "LOCAL_RANK")):
            environ[ours] = environ[f"OMPI_COMM_WORLD_{mpi}"]
        environ.setdefault("MASTER_ADDR", "localhost")
        environ.setdefault("MASTER_PORT", str(rendezvous_port(environ)))
    if "LOCAL_RANK" in environ:
        return
    # port 0: the group's store binds a free port itself, so no other process can take the
    # port between its choice and its use (a port found free and then given was, once)
    environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0")


def killed_at(step: int) -> None:
    """The test hook: exit at `step` with no result and no clean-up, as a preempted job."""
    if os.environ.get(KILL_HOOK) == str(step):
        os._exit(137)


def write_result(out: Path, status: str, result: dict[str, Any]) -> None:
    write_json(out, {"status": status, **result, "versions": package_versions()})


def run(point: Point, out: Path, work: Callable[[Device], Measured], summarise: Summarise) -> int:
    """Run this rank's `work` on its device; then rank 0 writes `summarise` of every rank's."""
    rank_environment()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if rank == 0:
        out.unlink(missing_ok=True)  # never take an earlier run's result as this one's
    with timeline.phase("device"):
        device = resolve(getattr(point, "device", None) or "auto")
    card = None if device.spec.host else local_rank
    required = tuple(filter(None, os.environ.get(ENERGY_SOURCES, "").split(",")))
    try:  # its card's counter; the first rank of a node, the node's CPU packages too
        with timeline.phase("device"):
            meter = EnergyMeter(device.kind, card, package=local_rank == 0, required=required)
    except EnergySourceError as exc:
        print(f"rank {rank}: error: {exc}", file=sys.stderr)
        return 2
    try:
        local = work(device)
    except torch.OutOfMemoryError as exc:
        last = traceback.format_exception_only(exc)[-1].strip().splitlines()[-1]
        write_result(out, "does-not-fit", {"point": point.as_dict(), "error": last})
        return 0
    except Exception:
        # a collective breaks when a peer exits for lack of memory, its does-not-fit written
        with contextlib.suppress(OSError, ValueError):
            if read_record(out).get("status") == "does-not-fit":
                return 0
        raise
    measured: list[Any] = [(local, node_name(), meter.stop())]  # where this rank ran
    if torch.distributed.is_initialized():  # every rank's, once every rank has finished its work
        mine, measured = measured[0], [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(measured, mine)
    if rank == 0:
        measurements, hosts, energies = map(list, zip(*measured, strict=True))
        result = {**summarise(measurements), "rank_hosts": hosts, "energy": combine(energies)}
        clock = timeline.current()
        marks, phases = clock.marks, clock.phases()
        started = timeline.process_start()  # the launcher's end, for the job (launch.py)
        write_result(out, "ok", result | {"timeline": marks, "phases": phases, "started": started})
    if torch.distributed.is_initialized():
        # leave together: a rank that tears gloo down while a peer still talks aborts it
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


def exit_now(code: int) -> NoReturn:
    """A rank's last act: skip finalization, where gloo's threads can abort a finished job
    ("terminate called without an active exception", seen 2026-11-30; pytorch/pytorch#179291)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    logging.shutdown()
    os._exit(code)
