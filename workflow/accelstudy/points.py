"""Sweep points as types, built once from the config (the rules pass them to jobs as JSON): each
carries only the config values its job depends on, so editing one knob re-runs only its points."""

import dataclasses
import itertools
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, NamedTuple, Self

from accelstudy import options
from accelstudy.strategies import STRATEGIES


@dataclass(frozen=True)
class Point:
    """JSON in, JSON out: what a rule passes and what a record keeps as `parameters`."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()  # fields left out of the JSON while None

    def as_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        return {k: v for k, v in values.items() if not (k in self.OPTIONAL and v is None)}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Self:
        return cls(**values)

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


_default = options.default  # a field's default: the schema's (a sweep axis's: its first value)


@dataclass(frozen=True)
class Lora:
    rank: int = _default("finetune.lora.rank")
    alpha: float = _default("finetune.lora.alpha")
    dropout: float = _default("finetune.lora.dropout")
    targets: tuple[str, ...] = tuple(_default("finetune.lora.targets"))


@dataclass(frozen=True)
class FinetunePoint(Point):
    """One (strategy, attention, cards, repeat) of the fine-tuning sweep, as its ranks read it."""

    strategy: str = _default("finetune.strategies")[0]
    attention: str = _default("finetune.attention")[0]
    cards: int = _default("finetune.cards")[0]
    repeat: int = 0
    seed: int = _default("seed")
    method: str = _default("finetune.method")
    dtype: str = _default("finetune.dtype")
    max_steps: int = _default("finetune.max_steps")
    max_samples: int | None = _default("finetune.max_samples")
    per_device_batch: int = _default("finetune.per_device_batch")
    grad_accum: int = _default("finetune.grad_accum")
    max_seq_length: int = _default("finetune.max_seq_length")
    learning_rate: float = _default("finetune.learning_rate")
    max_grad_norm: float = _default("finetune.max_grad_norm")
    throughput_warmup_steps: int = _default("finetune.throughput_warmup_steps")
    lora: Lora = field(default_factory=Lora)
    skip_predicted_oom: bool = _default("finetune.skip_predicted_oom")
    on_unsupported: str = _default("finetune.on_unsupported")
    checkpoint_steps: int | None = _default("finetune.checkpoint_steps")
    gaudi_mode: str = _default("finetune.gaudi_mode")
    data: dict[str, Any] = field(default_factory=partial(_default, "finetune.data"))
    zero3_persistence_threshold: int | None = _default("finetune.zero3_persistence_threshold")
    device: str | None = None  # the ranks' device kind; None: detect

    OPTIONAL: ClassVar[tuple[str, ...]] = ("zero3_persistence_threshold", "device")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Self:
        lora = dict(values.get("lora") or {})
        lora["targets"] = tuple(lora.get("targets", Lora.targets))
        return cls(**{**values, "lora": Lora(**lora)})

    @property
    def samples_per_step(self) -> int:
        """Samples one rank consumes per optimiser step."""
        return self.per_device_batch * self.grad_accum

    def untimed(self) -> str | None:
        """Why this point would time no step after its throughput warm-up (None: it times some)."""
        if self.max_steps > self.throughput_warmup_steps:
            return None
        return (f"finetune.max_steps {self.max_steps} leaves no step to time after "
                f"finetune.throughput_warmup_steps {self.throughput_warmup_steps}: set "
                f"max_steps to at least {self.throughput_warmup_steps + 1}")  # fmt: skip

    def hpu_mode(self) -> str:
        """lazy as the authors ran DDP and ZeRO-3; compile for FSDP (Gaudi needs it) or if asked"""
        compiled = STRATEGIES[self.strategy].hpu_compile or self.gaudi_mode == "compile"
        return "compile" if compiled else "lazy"

    def hpu_env(self) -> dict[str, str]:
        """Habana's bridge takes its mode from the environment once, when torch loads it."""
        return {"PT_HPU_LAZY_MODE": "1" if self.hpu_mode() == "lazy" else "0"}


@dataclass(frozen=True)
class DiffusionPoint(Point):
    """One (devices, repeat) of the SR3 strong-scaling sweep, as its ranks read it."""

    devices: int = _default("diffusion.devices")[0]
    repeat: int = 0
    seed: int = _default("seed")
    total_iterations: int = _default("diffusion.total_iterations")
    warmup_iterations: int = _default("diffusion.warmup_iterations")
    batch_per_device: int = _default("diffusion.batch_per_device")
    learning_rate: float = _default("diffusion.learning_rate")
    dtype: str = _default("diffusion.dtype")
    model: dict[str, Any] = field(default_factory=partial(_default, "diffusion.model"))
    schedule: dict[str, Any] = field(default_factory=partial(_default, "diffusion.schedule"))
    quality: dict[str, Any] = field(default_factory=partial(_default, "diffusion.quality"))
    device: str | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("device",)

    @property
    def iterations_per_device(self) -> int:
        """Strong scaling: the fixed work is iterations x ranks, as the authors' n_iter."""
        return math.ceil(self.total_iterations / self.devices)

    def untimed(self) -> str | None:
        """Why this point would time no iteration after its warm-up (None: it times some)."""
        if self.iterations_per_device > self.warmup_iterations:
            return None
        return (f"diffusion.total_iterations {self.total_iterations} over {self.devices} devices "
                f"is {self.iterations_per_device} per device, none after "
                f"diffusion.warmup_iterations {self.warmup_iterations}: set total_iterations to "
                f"at least {self.warmup_iterations * self.devices + 1} (or lower "
                "warmup_iterations or drop that count from devices)")  # fmt: skip


# the fields a point takes from its config block (the rest: wildcards, seed, data, device)
NOT_CONFIG = {"strategy", "attention", "cards", "devices", "repeat", "seed", "data", "device"}
FINETUNE_KEYS = [f.name for f in dataclasses.fields(FinetunePoint) if f.name not in NOT_CONFIG]
DIFFUSION_KEYS = [f.name for f in dataclasses.fields(DiffusionPoint) if f.name not in NOT_CONFIG]


def bits_label(bits: Iterable[int]) -> str:
    """A PTQ bit list as records and the report show it: [16, 8, 4] -> '[16,8,4]'."""
    return "[" + ",".join(map(str, bits)) + "]"


def bits_path(bits: Iterable[int]) -> str:
    """A PTQ bit list as result paths name it: [16, 8, 4] -> '16-8-4'."""
    return "-".join(map(str, bits))


class SweepCell(NamedTuple):
    """Where a fine-tuning point's record goes: its model and its wildcards."""

    model: str
    strategy: str
    attention: str
    cards: int
    repeat: int


def finetune_cells(config: Mapping[str, Any]) -> Iterator[SweepCell]:
    sweep = config["finetune"]
    models = sweep.get("models") or sorted(config["models"])
    axes = sweep["strategies"], sweep["attention"], sweep["cards"], range(sweep["repeats"])
    cells = itertools.product(models, *axes) if sweep["enabled"] else ()
    return itertools.starmap(SweepCell, cells)


def diffusion_cells(config: Mapping[str, Any]) -> Iterator[tuple[int, int]]:
    """(devices, repeat) of every diffusion point."""
    sweep = config["diffusion"]
    return itertools.product(sweep["devices"] if sweep["enabled"] else [], range(sweep["repeats"]))


def finetune_point(config: Mapping[str, Any], wildcards: Any, data_file: str) -> FinetunePoint:
    """The point a fine-tuning job runs: its config block, wildcards and the study's seed."""
    values = {key: config["finetune"][key] for key in FINETUNE_KEYS}
    values |= {key: getattr(wildcards, key) for key in ("strategy", "attention")}
    values |= {key: int(getattr(wildcards, key)) for key in ("cards", "repeat")}
    data = {"source": "local", "file": data_file}
    return FinetunePoint.from_dict(values | {"seed": config["seed"], "data": data})


def diffusion_point(config: Mapping[str, Any], wildcards: Any) -> DiffusionPoint:
    values = {key: config["diffusion"][key] for key in DIFFUSION_KEYS}
    cell = {"devices": int(wildcards.devices), "repeat": int(wildcards.repeat)}
    return DiffusionPoint.from_dict({**values, **cell, "seed": config["seed"]})
