"""Magnitude pruning of a decoder layer or projection, undone bit for bit: a scan never reloads."""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from accelstudy.pruning import FAMILIES, GRANULARITIES


@dataclass(frozen=True)
class Target:
    """What one sensitivity measurement prunes: a name, its decoder layer, its tensors."""

    name: str  # "layer-07" or "layer-07.mlp.down_proj"
    layer: int
    tensors: tuple[torch.Tensor, ...]
    per_tensor: bool  # one threshold per tensor (else one over all of them)


def decoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    return model.get_decoder().layers


@dataclass(frozen=True)
class DecoderLinear:
    """One Linear inside a decoder layer, under the key every PTQ stage shares."""

    key: str  # "layer-07.mlp.up_proj": assignments, recipes and accounting use it
    layer: int
    parent: nn.Module  # the decoder layer
    name: str  # "mlp.up_proj", relative to the decoder layer
    linear: nn.Linear


def decoder_linears(model: PreTrainedModel) -> list[DecoderLinear]:
    """Every Linear of the decoder layers, in order (lm_head and embeddings excluded)."""
    return [
        DecoderLinear(f"layer-{index:02d}.{name}", index, layer, name, module)
        for index, layer in enumerate(decoder_layers(model))
        for name, module in layer.named_modules()
        if isinstance(module, nn.Linear)
    ]


def targets(model: PreTrainedModel, granularity: str, family: str = "mlp") -> list[Target]:
    """Every pruning target of the model, in layer order."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity '{granularity}'; expected one of {GRANULARITIES}")
    if family not in FAMILIES:
        raise ValueError(f"unknown family '{family}'; expected one of {sorted(FAMILIES)}")
    linears = decoder_linears(model)
    if granularity == "submodule":
        chosen = [e for e in linears if e.name.rsplit(".", 1)[-1] in FAMILIES[family]]
        return [Target(e.key, e.layer, (e.linear.weight,), False) for e in chosen]
    out = []
    for index, layer in enumerate(decoder_layers(model)):
        tensors = tuple(e.linear.weight for e in linears if e.layer == index)
        if granularity == "layer-per-tensor":
            # the authors' A100 WikiText script: a threshold per tensor, norm weights included
            norms = [m for m in layer.modules() if "norm" in type(m).__name__.lower()]
            weights = (getattr(m, "weight", None) for m in norms)
            tensors += tuple(w for w in weights if isinstance(w, torch.Tensor))
        out.append(Target(f"layer-{index:02d}", index, tensors, granularity != "layer"))
    return out


def magnitude_threshold(tensors: tuple[torch.Tensor, ...], sparsity: float) -> torch.Tensor:
    """The k-th smallest |w| over all `tensors`, k = sparsity x count (at least 1)."""
    flat = torch.cat([t.detach().abs().flatten() for t in tensors])
    return flat.kthvalue(max(1, int(sparsity * flat.numel()))).values


@contextlib.contextmanager
@torch.no_grad()
def pruned(target: Target, sparsity: float) -> Iterator[int]:
    """Zero each weight with |w| under the threshold while inside (yields how many); restore."""
    saved, zeroed = [t.detach().clone() for t in target.tensors], 0
    try:
        for group in [(t,) for t in target.tensors] if target.per_tensor else [target.tensors]:
            threshold = magnitude_threshold(group, sparsity)
            for tensor in group:
                mask = tensor.abs() < threshold
                zeroed += int(mask.sum())
                tensor.masked_fill_(mask, 0.0)
        yield zeroed
    finally:
        for tensor, original in zip(target.tensors, saved, strict=True):
            tensor.copy_(original)
