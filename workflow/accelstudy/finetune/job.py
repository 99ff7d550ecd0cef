"""One fine-tuning point as one job: plan, launch, record (also where it does not fit)."""

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from transformers import PretrainedConfig

from accelstudy import timeline
from accelstudy.data.sources import describe_source, read_source
from accelstudy.finetune.planner import HOST_REFUSED_PAST, fit_check, host_overflow, meta_model
from accelstudy.flops import training_per_token
from accelstudy.kinds import KINDS
from accelstudy.launch import PointFailed, PointJob
from accelstudy.layout import results_of
from accelstudy.models import load_model_config
from accelstudy.points import FinetunePoint
from accelstudy.random_source import is_random
from accelstudy.records import Record
from accelstudy.snapshots import identity
from accelstudy.strategies import STRATEGIES
from accelstudy.systems import card_memory

WORKER = "accelstudy.finetune.train"


def unsupported(point: FinetunePoint, config: PretrainedConfig, device_kind: str) -> str | None:
    """Why this machine cannot run the point as asked, or None."""
    if package := STRATEGIES[point.strategy].engine.missing():
        return f"{point.strategy} needs {package}, which is not installed"
    model_class = type(meta_model(config))  # the plan's, already built
    habana = KINDS[device_kind].habana  # Habana's own flash attention
    if point.attention == "fused" and not habana and not model_class._supports_sdpa:
        return f"{model_class.__name__} has no fused (SDPA) attention; use attention eager"
    return None


def run(
    *, model_name: str, model_dir: Path, point: FinetunePoint, data_source: str, **flags: Any
) -> dict[str, Any]:
    """Plan, then (unless predicted not to fit) train one point; write its record."""
    if why := point.untimed():
        raise PointFailed(why)
    job = PointJob.from_flags(**flags)
    asked, config = point, load_model_config(model_dir)
    point = point.replace(dtype=job.ranks_dtype(point.dtype, point.cards))
    # card memory the system file states none of: read from the card here, and recorded
    with timeline.phase("plan"):
        card_gb, card_source = card_memory(job.system, job.ranks_device)
        system = replace(job.system, memory_per_card_gb=card_gb)
        metrics, over = fit_check(config, point, system, job.ranks_device, is_random(model_dir))
    on_cpu = card_gb is None and KINDS[job.system.device].host
    metrics["memory_per_card_source"] = "the node's RAM per rank" if on_cpu else card_source
    with timeline.phase("plan"):
        reason = unsupported(point, config, job.ranks_device)
    if reason and point.on_unsupported != "record":
        raise PointFailed(f"{reason} (or set finetune.on_unsupported: record)")
    if reason:
        metrics.update(status="unsupported", error=reason)
    elif point.skip_predicted_oom and over:
        metrics.update(status="predicted-does-not-fit", held_out_for=over)
    elif (host := host_overflow(metrics)) and host[0] > HOST_REFUSED_PAST * host[1]:
        past = f"host: planned {host[0]:.1f} GB, past {HOST_REFUSED_PAST}x the node's {host[1]:.1f}"
        metrics.update(status="predicted-does-not-fit", held_out_for=past)
    else:
        if host:  # skip_predicted_oom false: it runs, and its log says what may stop it
            warning = f"warning: this point plans {host[0]:.1f} GB of host RAM against the "
            print(f"{warning}node's {host[1]:.1f} GB; it runs (skip_predicted_oom: false)")
        args = ["--point", point.to_json(), "--model-dir", str(model_dir)]
        metrics |= job.launch(point.cards, WORKER, args, point.strategy, **point.hpu_env())
    rank = point.lora.rank if point.method == "lora" else 0
    flops = training_per_token(config.to_dict(), point.max_seq_length, rank, point.lora.targets)
    metrics["flops_per_token"] = flops
    file = point.data.get("file")  # the rules' points read a prepared file; else generated
    data = read_source(file) if file else describe_source(point.data, "train")
    inputs, parameters = {"model": identity(model_dir), "data": data}, asked.as_dict()
    with contextlib.suppress(ValueError):  # a rule's: the file named inside the study's results
        if file:
            parameters["data"]["file"] = os.path.relpath(file, results_of("finetune", job.out))
    return job.write(Record(stage="finetune", model=model_name, task="instructions",
                            method=point.strategy, data_source=data_source, inputs=inputs,
                            parameters=parameters, metrics=metrics))  # fmt: skip
