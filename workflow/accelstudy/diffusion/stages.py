"""One strong-scaling point as a pipeline stage: launch its ranks, write its record (also
`does-not-fit`); any other failure leaves no record and fails the job."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from accelstudy import device as devices
from accelstudy.config import config_hash, load_system
from accelstudy.launch import RanksDevice, run_ranks
from accelstudy.records import job_record, read_record, write_record

log = logging.getLogger("accelstudy")
WORKER = "accelstudy.diffusion.train"
GAUDI_ENV = {"PT_HPU_LAZY_MODE": "1", "PT_HPU_MAX_COMPOUND_OP_SIZE": "2"}  # the authors' port


def diffusion_point(*, study: str, system: str, point: dict[str, Any], data: Path, card: Path,
                    threads: int, out: Path, samples: Path,
                    device_kind: str = "auto") -> dict[str, Any]:  # fmt: skip
    """Train one (devices, repeat) point of the fixed work; write its record."""
    started = time.perf_counter()
    machine = load_system(system)
    device = devices.resolve(device_kind)
    data_card = read_record(card)  # the data card: plain JSON
    result = out.with_name(f".{out.stem}.ranks.json")
    args = ["--point", json.dumps(point), "--data", str(data), "--out", str(result),
            "--samples", str(samples)]  # fmt: skip
    env = GAUDI_ENV if machine["device"] == "hpu" else {}
    try:
        run_ranks(machine, point["devices"], WORKER, args, threads, env=env)
        outcome = json.loads(result.read_text())
    finally:
        result.unlink(missing_ok=True)
    metrics: dict[str, Any] = {"status": outcome["status"], **outcome.get("metrics", {})}
    if outcome["status"] != "ok":
        metrics["error"] = outcome.get("error", "")
        samples.unlink(missing_ok=True)
        samples.touch()  # the job's second output: empty where nothing was sampled
    if outcome.get("device", device.kind) != device.kind:  # launched from a card-less host
        device = RanksDevice(outcome["device"], machine.get("accelerator", outcome["device"]))
    metrics["wall_time_s"] = round(time.perf_counter() - started, 3)
    parameters = {**point, "data": data_card}
    record = job_record(
        stage="diffusion", study=study, system=system, device=device, model="sr3",
        task="dust-sr", method="ddp", protocol=None,
        data_source="standin" if data_card["standin"] else "local", parameters=parameters,
        metrics=metrics, config_hash=config_hash(parameters), wall_s=time.perf_counter() - started,
    )  # fmt: skip
    write_record(out, record)
    log.info("diffusion %s: %s", out, metrics["status"])
    return record
