"""One strong-scaling point as one job: its ranks, its record (also `does-not-fit`)."""

from pathlib import Path
from typing import Any

from accelstudy.data.sources import read_source
from accelstudy.launch import PointFailed, PointJob
from accelstudy.points import DiffusionPoint
from accelstudy.records import Record, read_record

WORKER = "accelstudy.diffusion.train"
GAUDI_ENV = {"PT_HPU_LAZY_MODE": "1", "PT_HPU_MAX_COMPOUND_OP_SIZE": "2"}  # the authors' port


def run(*, point: DiffusionPoint, data: Path, card: Path, samples: Path, **flags: Any) -> dict:
    """Train one (devices, repeat) point of the fixed work; write its record."""
    if why := point.untimed():
        raise PointFailed(why)
    job = PointJob.from_flags(**flags)
    asked, point = point, point.replace(dtype=job.ranks_dtype(point.dtype, point.devices))
    data_card = read_record(card)  # the data card: plain JSON
    args = ["--point", point.to_json(), "--data", str(data), "--samples", str(samples)]
    metrics = job.launch(point.devices, WORKER, args, **GAUDI_ENV)
    if metrics["status"] != "ok":
        samples.write_bytes(b"")  # the job's second output: empty where nothing was sampled
    source = "standin" if data_card["standin"] else "local"
    return job.write(Record(stage="diffusion", model="sr3", task="dust-sr", method="ddp",
                            data_source=source, inputs={"data": read_source(data)}, metrics=metrics,
                            parameters={**asked.as_dict(), "data": data_card}))  # fmt: skip
