"""One strong-scaling point as one Snakemake job: launch its ranks, write its record (also
`does-not-fit`); any other failure leaves no record and fails the job."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from accelstudy import device as devices
from accelstudy.config import config_hash
from accelstudy.launch import RanksDevice, run_ranks
from accelstudy.points import DiffusionPoint
from accelstudy.records import job_record, read_record, write_record
from accelstudy.systems import load_system

log = logging.getLogger("accelstudy")
WORKER = "accelstudy.diffusion.train"
GAUDI_ENV = {"PT_HPU_LAZY_MODE": "1", "PT_HPU_MAX_COMPOUND_OP_SIZE": "2"}  # the authors' port


def run(
    *,
    study: str,
    system: str,
    point: DiffusionPoint,
    data: Path,
    card: Path,
    threads: int,
    out: Path,
    samples: Path,
    device_kind: str = "auto",
) -> dict[str, Any]:
    """Train one (devices, repeat) point of the fixed work; write its record."""
    started = time.perf_counter()
    machine = load_system(system)
    device = devices.resolve(device_kind)
    data_card = read_record(card)  # the data card: plain JSON
    args = ["--point", point.to_json(), "--data", str(data), "--samples", str(samples)]
    outcome = run_ranks(machine, point.devices, WORKER, args, threads, out, hpu_env=GAUDI_ENV)
    metrics: dict[str, Any] = {"status": outcome["status"], **outcome.get("metrics", {})}
    if outcome["status"] != "ok":
        metrics["error"] = outcome.get("error", "")
        samples.unlink(missing_ok=True)
        samples.touch()  # the job's second output: empty where nothing was sampled
    if outcome.get("device", device.kind) != device.kind:  # launched from a card-less host
        device = RanksDevice(outcome["device"], machine.label)
    metrics["wall_time_s"] = round(time.perf_counter() - started, 3)
    parameters = {**point.as_dict(), "data": data_card}
    record = job_record(
        stage="diffusion",
        study=study,
        system=machine,
        device=device,
        model="sr3",
        task="dust-sr",
        method="ddp",
        protocol=None,
        data_source="standin" if data_card["standin"] else "local",
        parameters=parameters,
        metrics=metrics,
        config_hash=config_hash(parameters),
        wall_s=time.perf_counter() - started,
    )
    write_record(out, record)
    log.info("diffusion %s: %s", out, metrics["status"])
    return record
