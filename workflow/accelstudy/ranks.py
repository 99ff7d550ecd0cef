"""What every rank of a launched worker does around its work. Rank 0 writes the result; out
of memory is a result (`does-not-fit`, exit 0): the sweep goes on and the report shows the
hole. Any other error writes nothing, so the scheduler's retry starts the point afresh."""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from accelstudy.launch import rank_environment
from accelstudy.files import write_json
from accelstudy.records import package_versions, read_record

KILL_HOOK = "ACCELSTUDY_TEST_KILL_AFTER_SAVE"  # "N": dies after step N, as if preempted


def ensure_process_group_env() -> None:
    """Outside a launcher, describe a 1-process group so every run takes the same path."""
    if "LOCAL_RANK" in os.environ:
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip


def local_processes() -> int:
    """Ranks on this node, as torchrun, Open MPI (Gaudi) or DeepSpeed's launcher says."""
    for key in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_SIZE"):
        if key in os.environ:
            return int(os.environ[key])
    return 1


def killed_at(step: int) -> None:
    """The test hook: exit at `step` with no result and no clean-up, as a preempted job."""
    if os.environ.get(KILL_HOOK) == str(step):
        os._exit(137)


def does_not_fit(point: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    last = traceback.format_exception_only(exc)[-1].strip().splitlines()[-1]
    return {"status": "does-not-fit", "point": point, "error": last, "versions": package_versions()}


def peer_did_not_fit(out: Path) -> bool:
    """A rank's collective breaks when a peer exits for lack of memory; that peer has
    already written the does-not-fit result by then."""
    try:
        return read_record(out).get("status") == "does-not-fit"
    except (OSError, ValueError):
        return False


def gather(local: dict[str, Any]) -> list[dict[str, Any]]:
    if not torch.distributed.is_initialized():
        return [local]
    ranks: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(ranks, local)
    return ranks


def run(point: dict[str, Any], out: Path, work: Callable[[], dict[str, Any]],
        summarise: Callable[[list[dict[str, Any]]], dict[str, Any]],
        finished: Callable[[], None] = lambda: None) -> int:  # fmt: skip
    """Run this rank's `work`; rank 0 writes `summarise(every rank's measurements)`."""
    rank_environment()  # under mpirun (Gaudi): torch.distributed's variables from Open MPI's
    ensure_process_group_env()
    rank = int(os.environ["RANK"])
    if rank == 0:
        out.unlink(missing_ok=True)  # never take an earlier run's result as this one's
    try:
        local = work()
    except torch.OutOfMemoryError as exc:
        write_json(out, does_not_fit(point, exc))
        return 0
    except Exception:
        if peer_did_not_fit(out):
            return 0
        raise
    ranks = gather(local)  # every rank has finished its work
    if rank == 0:
        finished()
        write_json(out, summarise(ranks))
    if torch.distributed.is_initialized():
        # leave together: a rank that tears gloo down while a peer still talks aborts it
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0
