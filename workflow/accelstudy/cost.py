"""What a job's allocation was charged under its site's rule (the system file's `charge`):
node-hours by QOS (Perlmutter's `shared` QOS a fraction of a node), card-hours by the larger of
the cards, cores or memory share (Expanse's gpu-shared; whole nodes in its gpu partition),
card-hours (Voyager), core-hours (a workstation). No rule: `unknown`, never a guess."""

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Allocation:
    """What the job asked the scheduler for (SLURM's variables in a SLURM job)."""

    nodes: int
    cards: int
    cores: int
    memory_gb: float | None = None
    qos: str | None = None
    partition: str | None = None


def allocation(cards: int, cores: int, environ: Mapping[str, str] = os.environ) -> Allocation:
    """SLURM's view of this job where it runs under SLURM, else its own cards and cores."""
    if "SLURM_JOB_ID" not in environ:
        return Allocation(nodes=1, cards=cards, cores=cores)
    nodes = int(environ.get("SLURM_JOB_NUM_NODES", "1"))
    listed = [g for g in environ.get("SLURM_JOB_GPUS", "").split(",") if g]  # none: no GPU job
    gpus = environ.get("SLURM_GPUS_ON_NODE") or (str(len(listed)) if listed else "")
    per_node_cores = environ.get("SLURM_CPUS_ON_NODE")
    memory = environ.get("SLURM_MEM_PER_NODE")  # MB
    cards = int(gpus) * nodes if gpus.isdigit() else cards
    cores = int(per_node_cores) * nodes if per_node_cores else cores
    memory_gb = int(memory) * nodes / 1000 if memory and memory.isdigit() else None
    qos, partition = environ.get("SLURM_JOB_QOS"), environ.get("SLURM_JOB_PARTITION")
    return Allocation(nodes, cards, cores, memory_gb, qos, partition)


def charged(
    rule: Mapping[str, Any] | None, used: Allocation, hours: float, cards_per_node: int
) -> dict[str, Any]:
    """The units the site charges for `used` over `hours`, with the rule's terms spelled out."""
    if not rule:
        return {"status": "unknown", "reason": "the system file states no charge rule"}
    qos_factors = rule.get("qos") or {}
    if used.qos is not None and qos_factors and used.qos not in qos_factors:
        return {"status": "unknown", "reason": f"no charge factor for QOS '{used.qos}'"}
    if rule["per"] == "core":
        amount = float(used.cores)
    elif rule["per"] == "node":
        fractional = used.qos in rule.get("fractional_qos", ())
        amount = used.cards / cards_per_node if fractional else float(used.nodes)
    elif used.partition in rule.get("whole_node_partitions", ()):
        amount = float(used.nodes * cards_per_node)
    else:  # cards, or the cores or memory of as many cards where those are the larger share
        shares = [float(used.cards)]
        if "cores_per_card" in rule:
            shares.append(used.cores / rule["cores_per_card"])
        if "memory_per_card_gb" in rule and used.memory_gb is not None:
            shares.append(used.memory_gb / rule["memory_per_card_gb"])
        amount = max(shares)
    factor = rule.get("factor", 1) * qos_factors.get(used.qos, 1)
    units = amount * hours * factor
    terms = {"amount": round(amount, 6), "per": rule["per"], "hours": float(f"{hours:.6g}")}
    terms |= {"factor": factor, "allocation": asdict(used), "doc": rule["doc"]}
    return {"status": "ok", "units": float(f"{units:.6g}"), "unit": rule["unit"], **terms}
