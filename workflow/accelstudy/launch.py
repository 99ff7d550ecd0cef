"""(system file, cards, strategy) -> the launcher command that starts N ranks of a worker:
torchrun on one node, `srun --overlap` + c10d across SLURM nodes, on Gaudi mpirun (as
gaudi_spawn.py; over a Kubeflow MPIJob's hostfile) or DeepSpeed's launcher for ZeRO-3."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelstudy.finetune.sweep import nodes_for

log = logging.getLogger("accelstudy")
RENDEZVOUS_PORT = 29500
MPI_HOSTFILE = "/etc/mpi/hostfile"  # where a Kubeflow MPIJob's launcher finds its workers


def layout(system: Mapping[str, Any], cards: int) -> tuple[int, int]:
    """(nodes, ranks per node): cards spread evenly over as few nodes as hold them."""
    nodes = nodes_for(cards, system)
    return nodes, cards // nodes


def first_host(environ: Mapping[str, str]) -> str:
    """The first node of this SLURM allocation, where the c10d rendezvous listens."""
    out = subprocess.run(
        ["scontrol", "show", "hostnames", environ["SLURM_JOB_NODELIST"]],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.split()[0]


def command(system: Mapping[str, Any], cards: int, module: str, args: list[str],
            strategy: str = "ddp", environ: Mapping[str, str] | None = None,
            ) -> list[str]:  # fmt: skip
    """The full command that starts `cards` ranks of `python -m module args`."""
    environ = os.environ if environ is None else environ
    nodes, per_node = layout(system, cards)
    worker = ["-m", module, *args]
    if system["launcher"] == "mpirun":
        if strategy == "zero3" and nodes == 1:
            return ["deepspeed", f"--num_gpus={per_node}", "--no_local_rank", "--module",
                    module, *args]  # fmt: skip
        placement = (
            ["--hostfile", MPI_HOSTFILE, "--npernode", str(per_node)]
            if nodes > 1
            else ["--bind-to", "core", "--map-by", "socket:PE=6", "--rank-by", "core"]
        )
        return ["mpirun", "-n", str(cards), *placement, "--allow-run-as-root",
                sys.executable, *worker]  # fmt: skip
    torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={per_node}"]
    if nodes == 1:
        return [*torchrun, "--standalone", *worker]
    if system.get("scheduler") != "slurm":
        raise ValueError(
            f"{cards} cards need {nodes} nodes of system '{system['name']}', which only a "
            "SLURM allocation (or a Kubeflow MPIJob on Gaudi) provides here"
        )
    endpoint = f"{first_host(environ)}:{RENDEZVOUS_PORT}"
    return ["srun", "--overlap", f"--nodes={nodes}", "--ntasks-per-node=1", *torchrun,
            f"--nnodes={nodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={environ.get('SLURM_JOB_ID', 'accelstudy')}", *worker]  # fmt: skip


def rank_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Under mpirun, give each rank torch.distributed's variables from Open MPI's, as
    optimum-habana's distributed runner does (torchrun and DeepSpeed set them already)."""
    environ = os.environ if environ is None else environ
    if "RANK" in environ or "OMPI_COMM_WORLD_RANK" not in environ:
        return
    for ours, mpi in (("RANK", "RANK"), ("WORLD_SIZE", "SIZE"), ("LOCAL_RANK", "LOCAL_RANK")):
        environ[ours] = environ[f"OMPI_COMM_WORLD_{mpi}"]
    environ.setdefault("MASTER_ADDR", "localhost")
    environ.setdefault("MASTER_PORT", str(RENDEZVOUS_PORT))


def threads_per_rank(threads: int, cards: int, system: Mapping[str, Any]) -> int:
    """OMP threads per rank so the ranks of one node share its job's cores, not oversubscribe."""
    return max(1, threads // layout(system, cards)[1])


@dataclass(frozen=True)
class RanksDevice:
    """The ranks' device for the record, where the launching host has none of it."""

    kind: str
    label: str

    def name(self) -> str:
        return self.label


class PointFailed(RuntimeError):
    """The ranks exited with an error (not for lack of memory): no record, the job fails."""


def run_ranks(system: Mapping[str, Any], cards: int, module: str, args: list[str], threads: int,
              strategy: str = "ddp", env: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """Start `cards` ranks of `module` (its result is the path after `--out`); raise if they
    fail. `env` adds what the device's bridge reads as it loads (Gaudi's lazy mode)."""
    command_line = command(system, cards, module, args, strategy)
    environ = {**os.environ, "OMP_NUM_THREADS": str(threads_per_rank(threads, cards, system)),
               **(env or {})}  # fmt: skip
    log.info("launching: %s", " ".join(command_line))
    finished = subprocess.run(command_line, env=environ, check=False)
    result = Path(args[args.index("--out") + 1])
    if finished.returncode != 0 or not result.is_file():
        raise PointFailed(
            f"{module} on {cards} cards exited with status {finished.returncode}; see the job log"
        )
