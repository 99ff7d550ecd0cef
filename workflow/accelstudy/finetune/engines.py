"""The Trainer for a point: its engine's settings (accelstudy.strategies) on CPU (gloo) too, on
Gaudi optimum-habana's; and the model-state bytes a rank holds."""

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
from transformers import Trainer, TrainingArguments

from accelstudy.kinds import KINDS
from accelstudy.paths import PROJECT_ROOT
from accelstudy.points import FinetunePoint
from accelstudy.strategies import STATE_KEYS, STRATEGIES, WHOLE_COPIES, use_own_ninja

ATTENTION = {"fused": "sdpa", "eager": "eager"}
QUIET = dict(save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True)
# Habana/llama's gaudi_config.json, shipped so that no run looks it up on the Hub
GAUDI_CONFIG = PROJECT_ROOT / "envs" / "gaudi" / "gaudi_config.json"


def process_env() -> dict[str, str]:
    """Each rank's share of this process's cores; DeepSpeed's JIT-compiled ops cached per
    environment (the build names its include paths: a shared cache rebuilds, ~40 s, each time)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    keys = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_SIZE")
    local = next((int(os.environ[key]) for key in keys if key in os.environ), 1)
    threads = max(1, (cores or 1) // max(1, local))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    prefix = hashlib.sha256(sys.prefix.encode()).hexdigest()[:8]
    build = f"py{sys.version_info.major}{sys.version_info.minor}_torch{torch.__version__}_{prefix}"
    extensions = cache / "accelstudy" / "torch_extensions" / build.replace("+", "_")
    return {"OMP_NUM_THREADS": str(threads), "TORCH_EXTENSIONS_DIR": str(extensions)}


def build_cpu_ops() -> None:
    """DeepSpeed's CPU shared-memory op, built with the environment: no ZeRO-3 job builds it."""
    os.environ["TORCH_EXTENSIONS_DIR"] = process_env()["TORCH_EXTENSIONS_DIR"]
    use_own_ninja()
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    ShareMemCommBuilder().load()


def prepare_state(strategy: str, device_kind: str) -> None:
    """Before any training argument (whose `use_cpu` decides the state): the engine's own; on
    Gaudi, optimum-habana's model classes, before FSDP's are named."""
    if KINDS[device_kind].habana:
        from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

        adapt_transformers_to_gaudi()
    STRATEGIES[strategy].engine.prepare(device_kind)


def training_arguments(point: FinetunePoint, out: Path, device_kind: str, layers: list[str]) -> Any:
    """The authors' recipe: constant lr (their warmup_ratio did nothing), torch's AdamW (Habana's
    fused AdamW keeps the same states); on Gaudi GaudiTrainingArguments as Habana's LoRA example."""
    kwargs: dict[str, Any] = dict(output_dir=str(out), seed=point.seed, **QUIET)
    kwargs["logging_steps"] = 1  # every step's loss, for the record
    kwargs.update(max_steps=point.max_steps, per_device_train_batch_size=point.per_device_batch)
    kwargs.update(gradient_accumulation_steps=point.grad_accum, bf16=point.dtype == "bfloat16")
    kwargs.update(learning_rate=point.learning_rate, max_grad_norm=point.max_grad_norm)
    kwargs.update(lr_scheduler_type="constant", optim="adamw_torch")
    if point.checkpoint_steps:
        kwargs.update(save_strategy="steps", save_steps=point.checkpoint_steps, save_total_limit=1)
    kwargs |= STRATEGIES[point.strategy].engine.training_kwargs(point, device_kind, layers)
    if KINDS[device_kind].habana:
        from optimum.habana import GaudiTrainingArguments

        lazy = point.hpu_mode() == "lazy"
        kwargs.update(use_habana=True, use_lazy_mode=lazy, gaudi_config_name=str(GAUDI_CONFIG))
        kwargs["throughput_warmup_steps"] = point.throughput_warmup_steps
        if not lazy:
            kwargs.update(torch_compile=True, torch_compile_backend="hpu_backend")
            kwargs["pipelining_fwd_bwd"] = False
        return GaudiTrainingArguments(**kwargs)
    return TrainingArguments(**kwargs, use_cpu=KINDS[device_kind].host)


def trainer(point: FinetunePoint, device_kind: str, model: Any, args: Any, **kwargs: Any) -> Any:
    """StrategyTrainer; on Gaudi GaudiTrainer as Habana's LoRA example, its model flags (fused:
    Habana's flash attention; compiled: no fused RoPE) on the generation config, which it reads."""
    if not KINDS[device_kind].habana:
        return StrategyTrainer(model=model, args=args, **kwargs)
    from optimum.habana import GaudiConfig, GaudiTrainer

    flags, fused = model.generation_config, point.attention == "fused"
    flags.use_flash_attention = flags.flash_attention_causal_mask = fused
    if point.hpu_mode() == "compile":
        flags.use_fused_rope = False
    gaudi_config = GaudiConfig.from_pretrained(str(GAUDI_CONFIG))
    gaudi = GaudiTrainer(model=model, gaudi_config=gaudi_config, args=args, **kwargs)
    STRATEGIES[point.strategy].engine.adapt_gaudi_trainer(gaudi, model, point)
    return gaudi


class StrategyTrainer(Trainer):
    """FSDP in accelerate's state on a CPU too: accelerate enables it on accelerators only."""

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        if not self.args.fsdp or self.is_fsdp_enabled:
            return
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
    """Bytes of the model states this rank holds, from its own tensors (FSDP2's local shards)."""
    counts = dict.fromkeys(STATE_KEYS, 0)
    for param in model.parameters():
        kind = "params_trainable" if param.requires_grad else "params_frozen"
        if hasattr(param, "ds_tensor"):
            whole = _bytes(param.data)  # empty unless DeepSpeed holds it gathered
            counts[kind] += _bytes(param.ds_tensor) + whole
            counts[WHOLE_COPIES] += whole
        else:
            counts[kind] += _bytes(param)
            counts["grads"] += _bytes(param.grad)
    if hasattr(optimizer, "fp32_partitioned_groups_flat"):  # DeepSpeed's ZeRO-3 optimizer
        lows = optimizer.fp16_partitioned_groups_flat
        pairs = zip(optimizer.fp32_partitioned_groups_flat, lows, strict=True)
        counts["master_fp32"] = sum(_bytes(master) for master, low in pairs if master is not low)
        counts["grads"] = _bytes(optimizer.grad_partitions_flat_buffer)
        optimizer = optimizer.optimizer
    elif hasattr(optimizer, "single_partition_of_fp32_groups"):  # its ZeRO-1/2 optimizer: its
        # step holds this rank's gradients in FP32 on the master partition (the Meter looks then)
        masters = optimizer.single_partition_of_fp32_groups
        counts["master_fp32"] = sum(map(_bytes, masters))
        counts["grads"] = sum(_bytes(master.grad) for master in masters)
        optimizer = optimizer.optimizer
    states = [value for state in optimizer.state.values() for value in state.values()]
    counts["optimizer_states"] = sum(_bytes(v) for v in states if isinstance(v, torch.Tensor))
    return counts
