"""DDP, ZeRO-3 and FSDP as the authors configured them, made real on CPU (gloo) as well.

Through the Hugging Face Trainer alone, two strategies quietly degrade on a CPU:
- FSDP: accelerate turns an FSDP plugin on for accelerator devices only; with `use_cpu`
  the state is MULTI_CPU and the model is wrapped in DDP. `StrategyTrainer` puts the
  plugin into accelerate's state, so accelerate shards the model.
- ZeRO-3: with `use_cpu` the Trainer drops the DeepSpeed request; without it, on a
  machine without accelerators, accelerate starts no process group (and bf16 is refused).
  `prepare_state` creates accelerate's DeepSpeed state on gloo first; the arguments keep
  `use_cpu` and reuse that state. The model is loaded after the arguments exist, so
  `from_pretrained` partitions it as it loads (zero.Init).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainingArguments

STRATEGIES = ("ddp", "zero3", "fsdp")
ATTENTION = {"fused": "sdpa", "eager": "eager"}
STATE_KEYS = (
    "params_trainable", "params_frozen", "params_whole_copies", "grads", "master_fp32",
    "optimizer_states",
)  # fmt: skip


def cpu_threads(local_processes: int) -> int:
    """Cores this process may use (its affinity mask, e.g. SLURM's cpuset), split between
    the ranks on this node, so N processes do not oversubscribe the cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, local_processes))


def extensions_dir() -> Path:
    """Where DeepSpeed's JIT-compiled ops (the CPU shared-memory op) live: one user cache
    per Python and torch build, so the op is compiled once, not once per job."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    build = f"py{sys.version_info.major}{sys.version_info.minor}_torch{torch.__version__}"
    return cache / "accelstudy" / "torch_extensions" / build.replace("+", "_")


def process_env(local_processes: int) -> dict[str, str]:
    """Environment of each rank: the launcher exports it, and a rank applies it to itself."""
    return {
        "OMP_NUM_THREADS": str(cpu_threads(local_processes)),
        "TORCH_EXTENSIONS_DIR": str(extensions_dir()),
    }


def deepspeed_config(point: dict[str, Any]) -> dict[str, Any]:
    """The authors' ZeRO stage-3 settings; batch sizes are filled in by the Trainer.

    DeepSpeed keeps parameters under `stage3_param_persistence_threshold` (1e5 elements by
    default, which the authors kept) whole on every rank; a point may set it
    (`zero3_persistence_threshold`), e.g. 0 to shard a tiny model's parameters too.
    """
    zero: dict[str, Any] = {
        "stage": 3,
        "overlap_comm": False,
        "contiguous_gradients": False,
        "stage3_gather_16bit_weights_on_model_save": True,
    }
    if point.get("zero3_persistence_threshold") is not None:
        zero["stage3_param_persistence_threshold"] = point["zero3_persistence_threshold"]
    return {
        "zero_optimization": zero,
        "bf16": {"enabled": point["dtype"] == "bfloat16"},
        "gradient_clipping": point["max_grad_norm"],
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
    }


def fsdp_config(layer_classes: list[str]) -> dict[str, Any]:
    """The authors' FSDP in FSDP2 terms: decoder-layer auto wrap (peft's policy adds each
    LoRA layer, as their script did), FULL_SHARD = reshard after forward, no offload.
    FSDP2 always keeps the original parameters (as use_orig_params) and prefetches the
    next all-gather in backward (as BACKWARD_PRE). FSDP1, which transformers deprecates,
    fails on one process with tied embeddings (SmolLM2) when it falls back to NO_SHARD."""
    return {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls_to_wrap": layer_classes,
        "reshard_after_forward": True,
        "cpu_offload": False,
    }


def prepare_state(strategy: str, device_kind: str) -> None:
    """ZeRO-3 on CPU: accelerate's DeepSpeed state on gloo, before any training argument."""
    if strategy == "zero3" and device_kind == "cpu":
        from accelerate import PartialState

        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
        PartialState(backend="gloo")


def training_arguments(
    point: dict[str, Any], output_dir: Path, device_kind: str, layer_classes: list[str]
) -> TrainingArguments:
    """The authors' recipe as TrainingArguments. lr_scheduler 'constant' has no warm-up, so
    their --warmup_ratio 0.03 changed nothing and is not passed; nothing is saved or
    evaluated; the optimizer is torch's AdamW (Habana's fused AdamW keeps the same states)."""
    strategy = point["strategy"]
    on_cpu = device_kind == "cpu"
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": point["max_steps"],
        "per_device_train_batch_size": point["per_device_batch"],
        "gradient_accumulation_steps": point["grad_accum"],
        "learning_rate": point["lr"],
        "lr_scheduler_type": "constant",
        "max_grad_norm": point["max_grad_norm"],
        "optim": "adamw_torch",
        "bf16": point["dtype"] == "bfloat16",
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "logging_steps": 1,
        "seed": point.get("seed", 42),
        "disable_tqdm": True,
        "use_cpu": on_cpu,
    }
    if strategy == "zero3":
        kwargs["deepspeed"] = deepspeed_config(point)
        if on_cpu:  # reuse prepare_state's DeepSpeed-on-gloo state
            kwargs["accelerator_config"] = {"use_configured_state": True}
    else:
        kwargs.update(ddp_backend="gloo" if on_cpu else None, ddp_find_unused_parameters=False)
    if strategy == "fsdp":
        kwargs.update(fsdp=True, fsdp_config=fsdp_config(layer_classes))
    return TrainingArguments(**kwargs)


class StrategyTrainer(Trainer):
    """The Trainer, with FSDP switched on in accelerate's state where accelerate would not."""

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        if not self.args.fsdp or self.is_fsdp_enabled:
            return
        from accelerate import PartialState
        from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

        state = self.accelerator.state
        state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
        if state.mixed_precision != "no":
            state.fsdp_plugin.set_mixed_precision(state.mixed_precision)
        # both shared states, as accelerate itself does for DeepSpeed: a later
        # AcceleratorState() copies the partial state's distributed type over its own
        for shared in (state.__dict__, PartialState._shared_state):
            shared["distributed_type"] = DistributedType.FSDP
        self.is_fsdp_enabled = True


def _bytes(tensor: torch.Tensor | None) -> int:
    if tensor is None:
        return 0
    if hasattr(tensor, "to_local"):  # a DTensor (FSDP2): this rank's shard only
        tensor = tensor.to_local()
    return tensor.numel() * tensor.element_size()


def held_bytes(model: torch.nn.Module, optimizer: Any) -> dict[str, int]:
    """Bytes of the model states this rank holds, counted from its own tensors, at a
    moment when gradients exist (after the optimizer step, before they are zeroed).

    DDP: every parameter, gradient and optimizer state. FSDP2: the local shard of each
    parameter (DTensor), of its gradient and of its optimizer states. ZeRO-3: each
    parameter's partition (`ds_tensor`) plus the whole tensor where DeepSpeed keeps one
    gathered (`params_whole_copies`: parameters under the persistence threshold), the fp32
    master partitions of the trainable parameters (unless they are the parameter partitions
    themselves, as in fp32 training), the flat gradient-partition buffer, and the
    optimizer's states (of the fp32 partitions).
    """
    counts = dict.fromkeys(STATE_KEYS, 0)
    for param in model.parameters():
        kind = "params_trainable" if param.requires_grad else "params_frozen"
        if hasattr(param, "ds_tensor"):
            whole = _bytes(param.data)  # empty unless DeepSpeed holds it gathered
            counts[kind] += _bytes(param.ds_tensor) + whole
            counts["params_whole_copies"] += whole
        else:
            counts[kind] += _bytes(param)
            counts["grads"] += _bytes(param.grad)
    if hasattr(optimizer, "fp32_partitioned_groups_flat"):  # DeepSpeed's ZeRO-3 optimizer
        lows = optimizer.fp16_partitioned_groups_flat
        pairs = zip(optimizer.fp32_partitioned_groups_flat, lows, strict=True)
        counts["master_fp32"] = sum(_bytes(master) for master, low in pairs if master is not low)
        counts["grads"] = _bytes(optimizer.grad_partitions_flat_buffer)
        optimizer = optimizer.optimizer
    counts["optimizer_states"] = sum(
        _bytes(value)
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )
    return counts
