"""One sweep point as a pipeline stage: plan its memory, launch its ranks, write its record.

A point predicted not to fit is recorded unlaunched (`predicted-does-not-fit`) when the config
asks; one whose ranks run out of memory is recorded (`does-not-fit`) and the job succeeds, so
the sweep goes on. Any other failure fails the job with no record: a retry starts afresh."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import psutil

from accelstudy import device as devices
from accelstudy import launch
from accelstudy.config import config_hash, load_system
from accelstudy.finetune.planner import Workload, load_config, plan
from accelstudy.finetune.strategies import gaudi_env
from accelstudy.launch import PointFailed, RanksDevice, run_ranks
from accelstudy.records import job_record, write_record

log = logging.getLogger("accelstudy")
WORKER = "accelstudy.finetune.train"


def unsupported(point: dict[str, Any], model_dir: Path, device_kind: str) -> str | None:
    """Why this machine cannot run the point as asked, or None."""
    import importlib.util

    from transformers import AutoConfig, AutoModelForCausalLM

    if point["strategy"] == "zero3" and importlib.util.find_spec("deepspeed") is None:
        return "zero3 needs DeepSpeed, which is not installed"
    if point["attention"] == "fused" and device_kind != "hpu":
        config = AutoConfig.from_pretrained(str(model_dir))
        model_class = AutoModelForCausalLM._model_mapping[type(config)]
        if not getattr(model_class, "_supports_sdpa", False):
            return f"{model_class.__name__} has no fused (SDPA) attention; use attention eager"
    return None


def workload(point: dict[str, Any], device_kind: str) -> Workload:
    """The planner's view of a point (the worker reads the same keys)."""
    lora = point["lora"]
    persistence = point.get("zero3_persistence_threshold")
    return Workload(
        strategy=point["strategy"], cards=point["cards"], method=point["method"],
        dtype=point["dtype"], batch=point["per_device_batch"], seq_len=point["max_seq_length"],
        attention=point["attention"], lora_rank=lora["rank"], lora_targets=tuple(lora["targets"]),
        device=device_kind, **({} if persistence is None else {"zero3_persistence": persistence}),
    )  # fmt: skip


def memory_per_card(system: dict[str, Any], cards: int) -> float:
    """GB a card offers; on the cpu system the ranks of a node share its RAM."""
    if "memory_per_card_gb" in system:
        return float(system["memory_per_card_gb"])
    per_node = launch.layout(system, cards)[1]
    return psutil.virtual_memory().total / 1e9 / per_node


def finetune_point(*, study: str, system: str, model_name: str, model_dir: Path,
                   point: dict[str, Any], data_source: str, threads: int, out: Path,
                   device_kind: str = "auto") -> dict[str, Any]:  # fmt: skip
    """Plan, then (unless predicted not to fit) train one point; write its record."""
    started = time.perf_counter()
    machine = load_system(system)
    device = devices.resolve(device_kind)
    # the ranks' device, which a launcher without cards (a Kubeflow MPIJob's) lacks
    ranks_device = machine["device"] if device_kind == "auto" else device.kind
    predicted = plan(load_config(model_dir), workload(point, ranks_device))
    budget = memory_per_card(machine, point["cards"])
    metrics: dict[str, Any] = {"predicted": predicted.as_dict(), "memory_per_card_gb": budget}
    reason = unsupported(point, model_dir, ranks_device)
    if reason and point["on_unsupported"] != "record":
        raise PointFailed(f"{reason} (or set finetune.on_unsupported: record)")
    if reason:
        metrics.update(status="unsupported", error=reason)
    elif point["skip_predicted_oom"] and not predicted.fits(budget):
        metrics["status"] = "predicted-does-not-fit"
    else:
        result = out.with_name(f".{out.stem}.ranks.json")
        try:
            args = ["--point", json.dumps(point), "--model-dir", str(model_dir), "--out",
                    str(result)]  # fmt: skip
            env = gaudi_env(point) if machine["device"] == "hpu" else {}
            run_ranks(machine, point["cards"], WORKER, args, threads, point["strategy"], env)
            outcome = json.loads(result.read_text())
        finally:
            result.unlink(missing_ok=True)
        metrics.update(outcome.get("metrics", {}), status=outcome["status"])
        if outcome.get("device", device.kind) != device.kind:  # launched from a card-less host
            device = RanksDevice(outcome["device"], machine.get("accelerator", outcome["device"]))
        if outcome["status"] == "ok":
            metrics["model_state_bytes"] = outcome["model_state_bytes"]
            metrics["peak_memory_per_rank"] = metrics["peak_memory_bytes"]
            metrics["peak_memory_bytes"] = max(metrics["peak_memory_bytes"])
        else:
            metrics["error"] = outcome.get("error", "")
    metrics["wall_time_s"] = round(time.perf_counter() - started, 3)
    record = job_record(
        stage="finetune", study=study, system=system, device=device, model=model_name,
        task="instructions", method=point["strategy"], protocol=None, data_source=data_source,
        parameters=point, metrics=metrics, config_hash=config_hash(point),
        wall_s=time.perf_counter() - started,
    )  # fmt: skip
    write_record(out, record)
    log.info("finetune %s: %s", out, metrics["status"])
    return record
