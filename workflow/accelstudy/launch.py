"""Start a worker's ranks: torchrun, srun + c10d across nodes, on Gaudi mpirun or deepspeed."""

import importlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accelstudy.cost import Allocation, allocation
from accelstudy.device import Device
from accelstudy.errors import StudyError
from accelstudy.kinds import KINDS
from accelstudy.records import Job, Record
from accelstudy.strategies import REPLICATED, STRATEGIES
from accelstudy.systems import System

log = logging.getLogger("accelstudy")
RENDEZVOUS_PORT = 29500  # torch's default, outside a scheduler's job


def rendezvous_port(environ: Mapping[str, str] = os.environ) -> int:
    """The c10d store's port on the first node: in a SLURM job one of 20000-29999 by its id (two
    jobs sharing a node, two points of one study included, never both take 29500; the agents
    of one job agree), below Linux's ephemeral ports; else torch's default."""
    job = environ.get("SLURM_JOB_ID", "")
    return 20000 + int(job) % 10000 if job.isdigit() else RENDEZVOUS_PORT


def node_name() -> str:
    """Where this process runs: its SLURM node (several may share a host), else the host."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


ENERGY_SOURCES = "ACCELSTUDY_ENERGY_SOURCES"  # the system file's, for the ranks to require
MPI_HOSTFILE = "/etc/mpi/hostfile"  # where a Kubeflow MPIJob's launcher finds its workers


class PointFailed(StudyError):
    """The ranks exited with an error (not for lack of memory): no record, the job fails."""


def _ask_slurm(*args: str) -> list[str]:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()


def _field(shown: list[str], key: str) -> str:
    return next(item.split("=", 1)[1] for item in shown if item.startswith(f"{key}="))


def first_node_address() -> str:
    """The job's first node's NodeAddr, by job id: the plugin's job step lacks its node list."""
    shown = _ask_slurm("scontrol", "show", "job", "-o", os.environ["SLURM_JOB_ID"])
    first = _ask_slurm("scontrol", "show", "hostnames", _field(shown, "NodeList"))[0]
    return _field(_ask_slurm("scontrol", "show", "node", "-o", first), "NodeAddr")


def command(
    system: System,
    cards: int,
    module: str,
    args: list[str],
    strategy: str = REPLICATED,
    threads: int = 1,
) -> list[str]:
    """Across SLURM nodes, a step of one task per node, with `threads` cores and the cards."""
    nodes, per_node = system.layout(cards)
    worker = ["-m", module, *args]
    if system.launcher == "mpirun":
        if (own := STRATEGIES[strategy].engine.launcher) and nodes == 1:
            return [*(arg.format(per_node=per_node) for arg in own), module, *args]
        if nodes > 1:
            placement = ["--hostfile", MPI_HOSTFILE, "--npernode", str(per_node)]
        else:
            placement = ["--bind-to", "core", "--map-by", "socket:PE=6", "--rank-by", "core"]
        mpirun = ["mpirun", "-n", str(cards), *placement, "--allow-run-as-root"]
        return [*mpirun, sys.executable, *worker]
    torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={per_node}"]
    if nodes == 1:
        return [*torchrun, "--standalone", *worker]
    if system.scheduler != "slurm":
        raise ValueError(
            f"{cards} cards need {nodes} nodes of system '{system.name}', which only a "
            "SLURM allocation (or a Kubeflow MPIJob on Gaudi) provides here"
        )
    # one torchrun agent per node, in a step beside the batch step; c10d on the first node
    srun = ["srun", "--overlap", f"--nodes={nodes}", "--ntasks-per-node=1"]
    srun += [f"--cpus-per-task={threads}"]
    srun += [f"--gres=gpu:{per_node}"] if system.card_resource == "gpu" else []
    endpoint = f"--rdzv-endpoint={first_node_address()}:{rendezvous_port()}"
    job = f"--rdzv-id={os.environ['SLURM_JOB_ID']}"
    return [*srun, *torchrun, f"--nnodes={nodes}", "--rdzv-backend=c10d", endpoint, job, *worker]


@dataclass(kw_only=True)
class PointJob(Job):
    """A sweep point's job: launch its ranks on its cores, then write its record."""

    threads: int
    rank_hosts: list[str] = field(default_factory=list)  # where each rank ran, rank order
    cards: int = 0  # what the point launched on (none: held out before launching)

    def allocation(self) -> Allocation:
        return allocation(self.cards, self.threads)

    def rank_threads(self, cards: int) -> int:
        """OMP threads per rank: the ranks of one node share its job's cores, not oversubscribe."""
        return max(1, self.threads // self.system.layout(cards)[1])

    def ranks_and_threads(self) -> tuple[int, int]:
        return self.cards, self.rank_threads(self.cards or 1)

    @property
    def ranks_device(self) -> str:
        """The ranks' device kind, which a launcher without cards (a Kubeflow MPIJob's) lacks."""
        return self.system.device if self.device_kind == "auto" else self.device.kind

    def ranks_dtype(self, asked: str, cards: int) -> str:
        """The dtype the ranks compute in, resolved on the job's node (not the login node)."""
        return self.resolve_dtype(asked, self.ranks_device, self.rank_threads(cards))

    def in_process(self, cards: int) -> bool:
        """One rank on one node, not on Gaudi (its bridge reads its mode as torch loads): this
        job's process is the rank. A second process would import torch and transformers again
        (7-8 s on a 2-core CPU, half a small point's job) and torchrun's agent a third time."""
        one_node = self.system.layout(cards)[0] == 1
        gaudi = KINDS[self.ranks_device].habana or KINDS[self.system.device].habana
        return cards == 1 and one_node and not gaudi

    def rank_environ(self, cards: int, hpu_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """What the ranks get beside this process's environment: their share of the job's cores,
        what Habana's bridge reads (on Gaudi), the energy counters to read."""
        environ = {"OMP_NUM_THREADS": str(self.rank_threads(cards))}
        environ |= (hpu_env or {}) if KINDS[self.system.device].habana else {}
        return environ | {ENERGY_SOURCES: ",".join(self.system.energy)}

    def launch(
        self, cards: int, module: str, args: list[str], strategy: str = REPLICATED, **hpu_env: str
    ) -> dict[str, Any]:
        """The ranks' metrics and status, or PointFailed; `hpu_env`: what Habana's bridge reads."""
        result, self.cards = self.out.with_name(f".{self.out.stem}.ranks.json"), cards
        argv, environ = [*args, "--out", str(result)], self.rank_environ(cards, hpu_env)
        alone, launched = self.in_process(cards), time.time()
        try:
            status = (
                self._rank_here(module, argv, environ)
                if alone
                else self._ranks(
                    command(self.system, cards, module, argv, strategy, self.threads), environ
                )
            )
            if status != 0 or not result.is_file():
                why = f"exited with status {status}; see the job log"
                raise PointFailed(f"{module} on {cards} cards {why}")
            outcome = json.loads(result.read_text())
        finally:
            result.unlink(missing_ok=True)
        self.rank_hosts, self.energy = outcome.get("rank_hosts", []), outcome.get("energy")
        here = (outcome.get("rank_hosts") or [None])[0] == node_name()  # one clock: the launcher
        self.clock.take_ranks(outcome, alone, launched if here else None)  # rank 0's marks, phases
        # a launcher host without cards (a Kubeflow MPIJob's) records the cards its ranks used
        if outcome.get("device", self.device.kind) != self.device.kind:
            self.device = Device(outcome["device"], self.system.label)
        metrics = {**outcome.get("metrics", {}), "status": outcome["status"]}
        return metrics | ({} if outcome["status"] == "ok" else {"error": outcome.get("error", "")})

    @staticmethod
    def _ranks(command_line: list[str], environ: dict[str, str]) -> int:
        log.info("launching: %s", " ".join(command_line))
        return subprocess.run(command_line, env={**os.environ, **environ}, check=False).returncode

    @staticmethod
    def _rank_here(module: str, argv: list[str], environ: dict[str, str]) -> int:
        """The worker's main in this process, as its one rank (ranks.rank_environment gives it
        a 1-process group); an error in it is the point's failure, as a rank's exit would be.
        After it, the process is as before: its environment, and no process group (a caller
        that goes on, a test's or a bench's process, may start another point or a subprocess)."""
        import torch.distributed

        log.info("running %s here, as its one rank: %s", module, " ".join(argv))
        before = dict(os.environ)
        os.environ.update(environ)
        try:
            return int(importlib.import_module(module).main(argv))
        except Exception:  # its traceback in the job log, then the one line of PointFailed
            log.exception("%s failed", module)
            return 1
        finally:
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()  # left by a rank that did not finish
            os.environ.clear()
            os.environ.update(before)

    def write(self, measured: Record) -> dict[str, Any]:
        """A point's record also says its wall time and where each rank ran; log its status."""
        measured.metrics["wall_time_s"] = round(time.perf_counter() - self.started, 3)
        measured.metrics |= {"rank_hosts": self.rank_hosts} if self.rank_hosts else {}
        record = super().write(measured)
        log.info("%s %s: %s", measured.stage, self.out, measured.metrics["status"])
        return record
