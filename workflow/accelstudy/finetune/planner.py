"""Predict a fine-tuning point's per-device peak memory from the model's config alone.

The model is built on the meta device (shapes, no weights), so the paper's 8B, 27B and 70B
models are planned offline from resources/models/*/config.json. Model states follow from the
strategy and card count (DDP replicates them, FSDP and ZeRO-3 split them), activations from
the shapes of one micro-batch; a stated overhead covers the runtime itself."""

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

from accelstudy.paths import RESOURCES
from accelstudy.points import FinetunePoint
from accelstudy.snapshots import weights_dir

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The process and framework beyond the tensors counted here, stated, not fitted per point.
# cpu: allocator slack, thread pools, oneDNN's reordered bf16 weights; cuda: context and
# cuBLAS workspaces; hpu: the graph runtime.
FRAMEWORK_OVERHEAD = {"cpu": 0.3e9, "cuda": 1.0e9, "hpu": 2.0e9}
ZERO3_PERSISTENCE = 100_000  # DeepSpeed's default stage3_param_persistence_threshold


@dataclass(frozen=True)
class MemoryPlan:
    """Predicted bytes per card, by kind."""

    parameters: int
    gradients: int
    optimizer: int
    gathered: int  # FSDP / ZeRO-3: full weights all-gathered for the layers at work
    activations: int
    overhead: int

    @property
    def model_states(self) -> int:
        return self.parameters + self.gradients + self.optimizer

    @property
    def total(self) -> int:
        return self.model_states + self.gathered + self.activations + self.overhead

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "model_states": self.model_states, "total": self.total}

    def fits(self, memory_per_card_gb: float) -> bool:
        return self.total <= memory_per_card_gb * 1e9


def load_config(model: str | Path) -> PretrainedConfig:
    """A config from a directory (a prepared model, or one under resources/models)."""
    path = weights_dir(model) if Path(model).is_dir() else RESOURCES / "models" / str(model)
    return AutoConfig.from_pretrained(str(path))


def meta_model(config: PretrainedConfig) -> torch.nn.Module:
    """The model's shapes without its weights."""
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def model_state_bytes(model: torch.nn.Module, point: FinetunePoint) -> dict[str, int]:
    """What one rank holds, tensor by tensor (LoRA's A, rank x in, and B, out x rank, beside each
    targeted Linear), as the worker counts it (strategies.held_bytes). Everything takes the run's
    dtype (adapters are cast to it, as the authors' script did) except FSDP's trainable tensors,
    which its mixed precision keeps in FP32. FSDP shards every tensor; ZeRO-3 partitions every
    tensor but keeps those under its persistence threshold whole on every rank, and its optimizer
    works on FP32 master partitions (4 + 8 bytes)."""
    tensors = [(p.numel(), point.method == "full") for p in model.parameters()]
    if point.method == "lora":
        rank, targets = point.lora.rank, point.lora.targets
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
                tensors += [(rank * module.in_features, True), (module.out_features * rank, True)]
    width, n, strategy = BYTES[point.dtype], point.cards, point.strategy
    persistence = point.zero3_persistence_threshold
    persistence = ZERO3_PERSISTENCE if persistence is None else persistence
    # FSDP: accelerate's mixed precision upcasts the trainable weights to FP32 shards
    trained = 4 if strategy == "fsdp" else width
    out = dict.fromkeys(("parameters", "gradients", "optimizer"), 0)
    for elements, trainable in tensors:
        share = elements if strategy == "ddp" else math.ceil(elements / n)
        held = share + (elements if strategy == "zero3" and elements < persistence else 0)
        out["parameters"] += held * (trained if trainable else width)
        if trainable:
            out["gradients"] += share * trained
            out["optimizer"] += share * (12 if strategy == "zero3" else 2 * trained)
    # AdamW's step: one per trainable tensor; DeepSpeed's optimizer sees one flat group
    steps = 1 if strategy == "zero3" else sum(1 for _, trainable in tensors if trainable)
    out["optimizer"] += 4 * steps
    return out


def activation_bytes(config: PretrainedConfig, point: FinetunePoint) -> int:
    """Tensors autograd keeps for the backward pass of one micro-batch, per card (sharding does
    not split them). Per decoder layer and token: both norms' inputs and outputs (4h), q, k, v
    (h + 2kv), q and k after RoPE (h + kv), k and v repeated per query head (2h), attention
    output and o_proj's input (2h), LoRA's dropped-out inputs (h per target), the MLP's gate,
    up, activation and product (4i); eager attention adds the (heads x seq x seq) scores, their
    FP32 softmax and its copy. Logits: the run's dtype, then FP32 thrice (loss, log-softmax,
    gradient)."""
    b, s = point.per_device_batch, point.max_seq_length
    h, i, n = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    q, kv = heads * head_dim, config.num_key_value_heads * head_dim
    width = BYTES[point.dtype]
    lora = len(point.lora.targets) * h if point.method == "lora" else 0
    per_token = 4 * h + (q + 2 * kv) + (q + kv) + 2 * q + 2 * h + lora + 4 * i
    per_layer = b * s * per_token * width
    if point.attention == "eager":
        per_layer += b * heads * s * s * (2 * width + 4)
    return n * per_layer + b * s * config.vocab_size * (width + 3 * 4)


def plan(config: PretrainedConfig, point: FinetunePoint, device: str) -> MemoryPlan:
    """Per-card bytes of one point on a `device` kind: model states (`model_state_bytes`),
    what a sharded rank gathers at once (the unwrapped rest and two decoder layers, the
    current and the prefetched next), activations and the framework overhead."""
    model = meta_model(config)
    states = model_state_bytes(model, point)
    layers = model.get_decoder().layers  # a sharded rank gathers one (and the next) at a time
    layer = sum(p.numel() for p in layers[0].parameters())
    rest = sum(p.numel() for p in model.parameters()) - len(layers) * layer
    sharded = point.strategy != "ddp" and point.cards > 1
    gathered = (rest + 2 * layer) * BYTES[point.dtype] if sharded else 0
    activations = activation_bytes(config, point)
    overhead = int(FRAMEWORK_OVERHEAD[device])
    return MemoryPlan(**states, gathered=gathered, activations=activations, overhead=overhead)


def plan_point(
    model: str | Path, device: str, batch: int = 2, seq_len: int = 512, **point: Any
) -> MemoryPlan:
    """`accelstudy plan-memory`: a model directory or resources/models name, a device kind, the
    batch per device, the sequence length and the point's other fields (FinetunePoint's)."""
    workload = FinetunePoint(per_device_batch=batch, max_seq_length=seq_len, **point)
    return plan(load_config(model), workload, device)
