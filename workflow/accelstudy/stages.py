"""The pipeline's stages as plain Python functions; the CLI and the rules call these."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from accelstudy import device as devices
from accelstudy.config import config_hash
from accelstudy.data.sources import prepare_split, read_prepared
from accelstudy.evaluate import evaluate_task
from accelstudy.models import load_from_source, load_prepared, save_prepared
from accelstudy.records import job_record, write_record

log = logging.getLogger("accelstudy")


def prepare_model(spec: dict[str, Any], out: Path, seed: int = 0) -> None:
    """Load a model from its source once and save it as safetensors under results/."""
    started = time.perf_counter()
    model, tokenizer = load_from_source(spec, seed=seed)
    save_prepared(model, tokenizer, out)
    log.info("prepared model in %.1fs -> %s", time.perf_counter() - started, out)


def prepare_data(task: str, spec: dict[str, Any], split: str, out: Path) -> int:
    """Load one split of a task from its source and cache it as JSON Lines."""
    rows = prepare_split(task, spec, split, out)
    log.info("prepared %d rows of %s/%s -> %s", rows, task, split, out)
    return rows


def baseline(*, study: str, system: str, model_name: str, model_dir: Path, task: str,
             protocol: str, data: Path, data_source: str, settings: dict[str, Any],
             limit: int | None, out: Path,
             device_kind: str = "auto") -> dict[str, Any]:  # fmt: skip
    """Evaluate the unquantized model on one task and write its result record."""
    started = time.perf_counter()
    device = devices.resolve(device_kind)
    dtype = devices.DTYPES[settings.get("dtype", "float32")]
    model, tokenizer = load_prepared(model_dir, dtype=dtype)
    model.to(device.torch)
    rows = read_prepared(data)
    metrics, _ = evaluate_task(model, tokenizer, task, protocol, rows, settings, device, limit)
    parameters = {"settings": settings, "limit": limit, "dtype": str(dtype).removeprefix("torch.")}
    record = job_record(
        stage="baseline", study=study, system=system, device=device, model=model_name,
        task=task,
        method="fp32" if dtype == torch.float32 else str(dtype).removeprefix("torch."),
        protocol=protocol, data_source=data_source, parameters=parameters, metrics=metrics,
        config_hash=config_hash({"parameters": parameters, "task": task, "protocol": protocol}),
        wall_s=time.perf_counter() - started,
    )  # fmt: skip
    write_record(out, record)
    return record
