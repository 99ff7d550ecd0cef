"""The fine-tuning strategies (the config schema's `finetune.strategies`, filled in from here):
what each one is, for the trainer set-up, the launcher, the memory planner, the study's checks
and the report, so that no module branches on a strategy's name."""

import importlib.util
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from accelstudy.kinds import KINDS

STATES = frozenset({"parameters", "gradients", "optimizer"})  # what a strategy may split
# the model-state bytes a rank records (finetune.engines.held_bytes), by kind; the whole copies
# (ZeRO-3's gathered tensors) are a part of the parameters' bytes, not beside them
WHOLE_COPIES = "params_whole_copies"
STATE_KEYS = ("params_trainable", "params_frozen", WHOLE_COPIES, "grads", "master_fp32",
              "optimizer_states")  # fmt: skip


def states_held(held: Mapping[str, float]) -> float:
    """A rank's model-state bytes in all, from its recorded counts (NaN where one is missing)."""
    return sum(held.get(key, math.nan) for key in STATE_KEYS if key != WHOLE_COPIES)


class Loads(StrEnum):
    """Who reads the weights from disk (the planner's host share, the ranks' loading)."""

    EVERY_RANK = "every rank"
    RANK_ZERO = "rank 0"  # the others start from empty tensors and receive rank 0's
    ITS_PARTITION = "its partition"  # each rank its own shard (ZeRO-3's zero.Init)


@dataclass(frozen=True)
class Engine:
    """What wraps the model and optimizer (torch's DDP by default): its Trainer settings, the
    package it needs, its own launcher, what the planner counts for it. `name` is its row in
    resources/planner_constants.csv (cpu_engine, cpu_heap_kept)."""

    name: str
    package: str | None = None  # needed beyond torch: checked before any job and per point
    launcher: tuple[str, ...] = ()  # its own one-node launcher under mpirun ({per_node} filled)
    reuse_elements: int = 0  # parameters it keeps gathered within this reuse distance

    def missing(self) -> str | None:
        """Its package where this environment lacks it, else None."""
        absent = self.package and importlib.util.find_spec(self.package) is None
        return self.package if absent else None

    def prepare(self, device_kind: str) -> None:
        """Before any training argument is made (its `use_cpu` decides the state)."""

    def training_kwargs(self, point: Any, device_kind: str, layers: list[str]) -> dict[str, Any]:
        """The Trainer's arguments for this engine: torch's process group on gloo on a CPU."""
        kind, kwargs = KINDS[device_kind], dict(ddp_find_unused_parameters=False)
        return {} if kind.habana else kwargs | {"ddp_backend": kind.backend}

    def adapt_gaudi_trainer(self, trainer: Any, model: Any, point: Any) -> None:
        """What GaudiTrainer needs beyond its arguments (nothing but under FSDP)."""

    def cpu_heap(
        self, kept: float, weights: int, layers: int, layer: int, reused: int, cards: int
    ) -> float:
        """What glibc's heap keeps on a CPU rank, from its fitted `kept`, the weights' bytes, the
        layers, a layer's bytes, what its activations reuse and the cards:
        here `kept` times the weights (the Trainer's copy to cpu:0, DDP's broadcast buckets)."""
        return kept * weights


def use_own_ninja() -> None:
    """This environment's ninja first on PATH: another ninja (the system's) rebuilds DeepSpeed's
    op that this one built (~40 s), and without the environment on PATH torch finds none."""
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


class DeepSpeed(Engine):
    """The authors' ZeRO settings at the strategy's stage, on gloo on a CPU."""

    def prepare(self, device_kind: str) -> None:
        if KINDS[device_kind].host:  # ZeRO on CPU: DeepSpeed's state on gloo (use_cpu drops it)
            from accelerate import PartialState

            os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
            use_own_ninja()
            PartialState(backend="gloo")

    def training_kwargs(self, point: Any, device_kind: str, layers: list[str]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"deepspeed": deepspeed_config(point)}
        if KINDS[device_kind].host:  # reuse prepare's DeepSpeed-on-gloo state
            kwargs["accelerator_config"] = {"use_configured_state": True}
        return kwargs

    def cpu_heap(
        self, kept: float, weights: int, layers: int, layer: int, reused: int, cards: int
    ) -> float:
        """Its flat gather buffers and per-parameter copies: `kept` layers' weights per layer."""
        return kept * layers * layer


class FullySharded(Engine):
    """torch's FSDP2 through accelerate; on Gaudi the authors' FSDP (optimum-habana)."""

    def training_kwargs(self, point: Any, device_kind: str, layers: list[str]) -> dict[str, Any]:
        if KINDS[device_kind].habana:
            gaudi = {**GAUDI_FSDP, "transformer_layer_cls_to_wrap": layers}
            return dict(fsdp="full_shard auto_wrap", fsdp_config=gaudi)
        fsdp = dict(fsdp=True, fsdp_config={**FSDP2, "transformer_layer_cls_to_wrap": layers})
        return super().training_kwargs(point, device_kind, layers) | fsdp

    def adapt_gaudi_trainer(self, trainer: Any, model: Any, point: Any) -> None:
        if point.method == "lora":  # wrap the adapters apart (Habana's LoRA example)
            from peft.utils.other import fsdp_auto_wrap_policy

            trainer.accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)

    def cpu_heap(
        self, kept: float, weights: int, layers: int, layer: int, reused: int, cards: int
    ) -> float:
        """Forward and backward, at least the layer's gathered buffer; on one rank, where
        nothing is gathered, the one layer at work's (bench/planner.py, #46)."""
        return 2 * (layers if cards > 1 else 1) * max(kept * layer - reused, layer)


# The authors' FSDP in FSDP2 terms (FSDP2 always has their use_orig_params and BACKWARD_PRE);
# FSDP1 fails on one process with tied embeddings (SmolLM2), falling back to NO_SHARD. Rank 0
# alone loads the weights (RAM-efficient loading) and accelerate broadcasts them.
FSDP2 = dict(version=2, auto_wrap_policy="TRANSFORMER_BASED_WRAP", reshard_after_forward=True)
FSDP2 |= dict(cpu_offload=False, cpu_ram_efficient_loading=True)
# The authors' FSDP settings (optimum-habana's language-modeling example) without their keys'
# `fsdp_` prefix (FULL_SHARD, auto wrap and no offload come from `fsdp` itself)
GAUDI_FSDP = dict(state_dict_type="FULL_STATE_DICT", use_orig_params=True, sync_module_states=True)
GAUDI_FSDP |= dict(activation_checkpointing=False, backward_prefetch="BACKWARD_PRE")
GAUDI_FSDP["forward_prefetch"] = False
BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")

TORCH_DDP = Engine("ddp")
# under mpirun on one node, DeepSpeed's own launcher; parameters within its
# stage3_max_reuse_distance (default 1e9 elements) stay gathered
DEEPSPEED_LAUNCHER = ("deepspeed", "--num_gpus={per_node}", "--no_local_rank", "--module")
DEEPSPEED = DeepSpeed("deepspeed", "deepspeed", DEEPSPEED_LAUNCHER, reuse_elements=1_000_000_000)
TORCH_FSDP = FullySharded("fsdp")


@dataclass(frozen=True)
class Strategy:
    name: str
    label: str  # as the paper's Fig. 2 and the report name it
    engine: Engine  # what wraps the model and optimizer
    shards: frozenset[str] = frozenset()  # the STATES split over the cards (none: replicated)
    trainable_bytes: int | None = None  # per trainable weight and gradient; None: the run's dtype
    gradient_bytes: int | None = None  # per gradient element at the step; None: trainable_bytes
    optimizer_bytes: int | None = None  # per trainable element; None: Adam's 2 x trainable_bytes
    whole_below_threshold: bool = False  # tensors under the persistence threshold stay whole
    flat_optimizer: bool = False  # the optimizer steps one flat group, not a tensor at a time
    loads: Loads = Loads.EVERY_RANK
    hpu_compile: bool = False  # Gaudi runs it only under torch.compile
    broadcast_bucket_bytes: int = 0  # the wrap-up copies the states into buckets of this size
    gather_bucket_elements: int = 0  # a coalesced all-gather's flat buffer, beside what it makes
    ties_sharded_apart: bool = False  # a tied embedding sharded as two tensors

    def __post_init__(self) -> None:
        object.__setattr__(self, "loads", Loads(self.loads))  # one of Loads, or ValueError
        if odd := set(self.shards) - STATES:
            raise ValueError(
                f"strategy '{self.name}' shards {sorted(odd)}: not among {sorted(STATES)}"
            )

    @property
    def zero_stage(self) -> int:
        """DeepSpeed's ZeRO stage for what it splits: 3 the parameters too, 2 the gradients and
        optimizer states, 1 the optimizer states alone (the planner counts the same split)."""
        order = ("parameters", "gradients", "optimizer")
        return next((3 - i for i, state in enumerate(order) if state in self.shards), 0)


STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        # replicated, the paper's reference; torch's DDP broadcasts the module's states at
        # wrap-up, coalesced into buckets of 250 MiB (its broadcast_bucket_size)
        Strategy("ddp", "DDP", TORCH_DDP, broadcast_bucket_bytes=250 * 2**20),
        # DeepSpeed's FP32 master partitions and Adam's moments (4 + 8 bytes), one flat group;
        # its all-gather fills a flat buffer of up to stage3_prefetch_bucket_size (5e7) elements
        Strategy("zero3", "ZeRO-3", DEEPSPEED, shards=STATES, optimizer_bytes=12,
                 whole_below_threshold=True, flat_optimizer=True, loads=Loads.ITS_PARTITION,
                 gather_bucket_elements=50_000_000),
        # accelerate's mixed precision upcasts the trainable shards to FP32; rank 0 alone loads
        # (RAM-efficient loading; every rank on Gaudi), and Gaudi needs torch.compile for it;
        # FSDP2 through accelerate shards a tied embedding and its head apart (traced, #46)
        Strategy("fsdp", "FSDP", TORCH_FSDP, shards=STATES, trainable_bytes=4,
                 loads=Loads.RANK_ZERO, hpu_compile=True, ties_sharded_apart=True),
    )
}  # fmt: skip


def deepspeed_config(point: Any) -> dict[str, Any]:
    """The authors' ZeRO-3 settings, at the stage of what the strategy splits (a registered
    ZeRO-2 trains as ZeRO-2); the Trainer fills in the batch sizes."""
    stage = STRATEGIES[point.strategy].zero_stage
    zero: dict[str, Any] = dict(stage=stage, overlap_comm=False, contiguous_gradients=False)
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if stage == 3 and point.zero3_persistence_threshold is not None:
        zero["stage3_param_persistence_threshold"] = point.zero3_persistence_threshold
    batches = dict.fromkeys(BATCH_KEYS, "auto")
    bf16 = {"enabled": point.dtype == "bfloat16"}
    return dict(zero_optimization=zero, bf16=bf16, gradient_clipping=point.max_grad_norm, **batches)


def labels() -> dict[str, str]:
    """Each strategy's label, in the registry's order (the report's)."""
    return {name: strategy.label for name, strategy in STRATEGIES.items()}


REPLICATED = next(s.name for s in STRATEGIES.values() if not s.shards)  # what others are held to
