"""The `baseline` stage, and the job (flags, evaluation, record) the quantized evaluation shares."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pandas as pd
from torch import nn
from transformers import PreTrainedModel
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy import device as devices
from accelstudy.data.sources import read_prepared, read_source
from accelstudy.evaluate import evaluate_task
from accelstudy.files import atomic_open
from accelstudy.models import load_prepared
from accelstudy.records import Job, Record
from accelstudy.snapshots import identity


@dataclass(kw_only=True)
class EvalJob(Job):
    """An evaluation stage's flags: a prepared model on one task's prepared rows."""

    model_name: str
    model_dir: Path
    task: str
    data: Path
    data_source: str
    settings: dict[str, Any]
    limit: int | None
    items: Path  # each item's outcome (Parquet, not JSON: `compare` reads *.json as records)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.measure_energy()

    def evaluate(self, model: nn.Module, tokenizer: Tokenizer, protocol: str) -> dict[str, Any]:
        """The metrics of a prepared model (a recipe's result: still the Hugging Face model);
        its items beside them, so two evaluations of the same items can be paired."""
        model.to(self.device.torch)
        rows = read_prepared(self.data)
        args = (self.task, protocol, rows, self.settings, self.device, self.limit)
        metrics, items = evaluate_task(cast(PreTrainedModel, model), tokenizer, *args)
        with atomic_open(self.items, "wb") as handle:
            pd.DataFrame(items).to_parquet(handle, index=False)
        return metrics

    def measured(self, **fields: Any) -> Record:
        """An evaluation's record: this job's model, task and data, and `fields`."""
        inputs = {"model": identity(self.model_dir), "data": read_source(self.data)}
        fields |= {"model": self.model_name, "task": self.task, "data_source": self.data_source}
        return Record(inputs=inputs, **fields)


Loaded = dict[str, tuple[PreTrainedModel, Tokenizer]]  # a dtype -> the model loaded in it


def baseline(*, protocol: str, loaded: Loaded | None = None, **flags: Any) -> dict[str, Any]:
    """Evaluate the unquantized model on one task and write its result record; `loaded`: the
    models an earlier evaluation in this process loaded (evaluation leaves them as they were)."""
    job = EvalJob.from_flags(**flags)
    dtype = job.resolve_dtype(job.settings.get("dtype", "float32"), job.device.kind)
    loaded = {} if loaded is None else loaded
    if dtype not in loaded:
        loaded[dtype] = load_prepared(job.model_dir, devices.DTYPES[dtype], job.device.torch)
    model, tokenizer = loaded[dtype]
    metrics = job.evaluate(model, tokenizer, protocol)
    parameters = {"settings": job.settings, "limit": job.limit, "dtype": dtype}
    method = "fp32" if dtype == "float32" else dtype
    hashed = {"parameters": parameters, "task": job.task, "protocol": protocol}
    measured = {"parameters": parameters, "metrics": metrics, "hashed": hashed}
    return job.write(job.measured(stage="baseline", method=method, protocol=protocol, **measured))


def baselines(*, runs: list[dict[str, Any]], **shared: Any) -> list[dict[str, Any]]:
    """The baseline job: one model on every task under every protocol (`runs`: each one's
    task, protocol, data, settings, limit, record and items), one process, the model loaded
    once; each record written as its evaluation ends."""
    loaded: Loaded = {}
    return [baseline(**shared, **run, loaded=loaded) for run in runs]
