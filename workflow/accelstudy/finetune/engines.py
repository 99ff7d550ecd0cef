"""DDP, ZeRO-3 and FSDP as the authors configured them, on CPU (gloo) too; on Gaudi, theirs."""

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
from transformers import Trainer, TrainingArguments

from accelstudy.paths import PROJECT_ROOT
from accelstudy.points import FinetunePoint
from accelstudy.strategies import STATE_KEYS, STRATEGIES, WHOLE_COPIES

ATTENTION = {"fused": "sdpa", "eager": "eager"}
BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")
QUIET = dict(save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True)
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


def use_own_ninja() -> None:
    """This environment's ninja first on PATH: another ninja (the system's) rebuilds the op that
    this one built (~40 s), and without the environment on PATH torch finds none."""
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def build_cpu_ops() -> None:
    """DeepSpeed's CPU shared-memory op, built with the environment: no ZeRO-3 job builds it."""
    os.environ["TORCH_EXTENSIONS_DIR"] = process_env()["TORCH_EXTENSIONS_DIR"]
    use_own_ninja()
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    ShareMemCommBuilder().load()


def deepspeed_config(point: FinetunePoint) -> dict[str, Any]:
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


def prepare_state(strategy: str, device_kind: str) -> None:
    """Before any training argument (whose `use_cpu` drops DeepSpeed): ZeRO-3 on CPU, DeepSpeed's
    state on gloo; on Gaudi, optimum-habana's model classes, before FSDP's are named."""
    if device_kind == "hpu":
        from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

        adapt_transformers_to_gaudi()
    if STRATEGIES[strategy].engine == "deepspeed" and device_kind == "cpu":
        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
        use_own_ninja()
        PartialState(backend="gloo")


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
    engine, on_cpu = STRATEGIES[point.strategy].engine, device_kind == "cpu"
    deepspeed, fsdp = engine == "deepspeed", engine == "fsdp"
    if deepspeed:
        kwargs["deepspeed"] = deepspeed_config(point)
    if device_kind == "hpu":
        from optimum.habana import GaudiTrainingArguments

        lazy = point.hpu_mode() == "lazy"
        kwargs.update(use_habana=True, use_lazy_mode=lazy, gaudi_config_name=str(GAUDI_CONFIG))
        kwargs["throughput_warmup_steps"] = point.throughput_warmup_steps
        if not lazy:
            kwargs.update(torch_compile=True, torch_compile_backend="hpu_backend")
            kwargs["pipelining_fwd_bwd"] = False
        if fsdp:
            gaudi_fsdp = {**GAUDI_FSDP, "transformer_layer_cls_to_wrap": layers}
            kwargs.update(fsdp="full_shard auto_wrap", fsdp_config=gaudi_fsdp)
        return GaudiTrainingArguments(**kwargs)
    kwargs["use_cpu"] = on_cpu
    if deepspeed and on_cpu:  # reuse prepare_state's DeepSpeed-on-gloo state
        kwargs["accelerator_config"] = {"use_configured_state": True}
    if not deepspeed:
        kwargs.update(ddp_backend="gloo" if on_cpu else None, ddp_find_unused_parameters=False)
    if fsdp:
        kwargs.update(fsdp=True, fsdp_config={**FSDP2, "transformer_layer_cls_to_wrap": layers})
    return TrainingArguments(**kwargs)


def trainer(point: FinetunePoint, device_kind: str, model: Any, args: Any, **kwargs: Any) -> Any:
    """StrategyTrainer; on Gaudi GaudiTrainer as Habana's LoRA example, its model flags (fused:
    Habana's flash attention; compiled: no fused RoPE) on the generation config, which it reads."""
    if device_kind != "hpu":
        return StrategyTrainer(model=model, args=args, **kwargs)
    from optimum.habana import GaudiConfig, GaudiTrainer

    flags, fused = model.generation_config, point.attention == "fused"
    flags.use_flash_attention = flags.flash_attention_causal_mask = fused
    if point.hpu_mode() == "compile":
        flags.use_fused_rope = False
    gaudi_config = GaudiConfig.from_pretrained(str(GAUDI_CONFIG))
    gaudi = GaudiTrainer(model=model, gaudi_config=gaudi_config, args=args, **kwargs)
    if STRATEGIES[point.strategy].engine == "fsdp" and point.method == "lora":
        from peft.utils.other import fsdp_auto_wrap_policy

        gaudi.accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(model)
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
    states = [value for state in optimizer.state.values() for value in state.values()]
    counts["optimizer_states"] = sum(_bytes(v) for v in states if isinstance(v, torch.Tensor))
    return counts
