"""The fine-tuning strategies (the config schema's `finetune.strategies`, filled in from here):
what each one is, for the trainer set-up, the launcher, the memory planner, the study's checks
and the report, so that no module branches on a strategy's name."""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

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
class Strategy:
    name: str
    label: str  # as the paper's Fig. 2 and the report name it
    engine: str  # what wraps the model: "ddp", "fsdp" (torch, through accelerate), "deepspeed"
    shards: frozenset[str] = frozenset()  # the STATES split over the cards (none: replicated)
    trainable_bytes: int | None = None  # per trainable weight and gradient; None: the run's dtype
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
        Strategy("ddp", "DDP", "ddp", broadcast_bucket_bytes=250 * 2**20),
        # DeepSpeed's FP32 master partitions and Adam's moments (4 + 8 bytes), one flat group;
        # its all-gather fills a flat buffer of up to stage3_prefetch_bucket_size (5e7) elements
        Strategy("zero3", "ZeRO-3", "deepspeed", shards=STATES, optimizer_bytes=12,
                 whole_below_threshold=True, flat_optimizer=True, loads=Loads.ITS_PARTITION,
                 gather_bucket_elements=50_000_000),
        # accelerate's mixed precision upcasts the trainable shards to FP32; rank 0 alone loads
        # (RAM-efficient loading; every rank on Gaudi), and Gaudi needs torch.compile for it;
        # FSDP2 through accelerate shards a tied embedding and its head apart (traced, #46)
        Strategy("fsdp", "FSDP", "fsdp", shards=STATES, trainable_bytes=4, loads=Loads.RANK_ZERO,
                 hpu_compile=True, ties_sharded_apart=True),
    )
}  # fmt: skip


def labels() -> dict[str, str]:
    """Each strategy's label, in the registry's order (the report's)."""
    return {name: strategy.label for name, strategy in STRATEGIES.items()}


REPLICATED = next(s.name for s in STRATEGIES.values() if not s.shards)  # what others are held to
