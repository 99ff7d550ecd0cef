"""Simulated (fake) quantization: group-wise quantize-dequantize of weights in FP32."""

from __future__ import annotations

import torch
from torch import nn

from accelstudy.ptq.prune import decoder_linears


def quantize_dequantize(weight: torch.Tensor, bits: int, group_size: int = 128,
                        symmetric: bool = True) -> torch.Tensor:  # fmt: skip
    """Groups of `group_size` consecutive weights along the input dimension (zero-padded).
    Symmetric: scale = max|w| / (2^(b-1) - 1), integers in [-2^(b-1), 2^(b-1) - 1].
    Asymmetric: scale = (max - min) / (2^b - 1), zero point = round(-min / scale)."""
    if not 2 <= bits <= 16:
        raise ValueError(f"bits must be in 2..16, got {bits}")
    out_features, in_features = weight.shape
    pad = (-in_features) % group_size
    w = torch.nn.functional.pad(weight.float(), (0, pad)).view(out_features, -1, group_size)
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        scale = w.abs().amax(-1, keepdim=True) / qmax
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        q = torch.clamp(torch.round(w / scale), -qmax - 1, qmax)
        deq = q * scale
    else:
        qmax = 2**bits - 1
        low, high = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
        scale = (high - low) / qmax
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        zero = torch.round(-low / scale)
        q = torch.clamp(torch.round(w / scale) + zero, 0, qmax)
        deq = (q - zero) * scale
    return deq.view(out_features, -1)[:, :in_features].to(weight.dtype)


@torch.no_grad()
def fake_quantize(model: nn.Module, module_bits: dict[str, int | None], group_size: int = 128,
                  symmetric: bool = True) -> int:  # fmt: skip
    """Quantize-dequantize each decoder Linear ('layer-07.mlp.up_proj') to its bits, in place;
    those mapped to None, lm_head, embeddings and norms stay FP32. Returns how many changed."""
    changed = 0
    for entry in decoder_linears(model):
        bits = module_bits.get(entry.key)
        if bits is None:
            continue
        weight = entry.linear.weight
        weight.copy_(quantize_dequantize(weight, bits, group_size, symmetric))
        changed += 1
    return changed


def layer_map(layer_bits: dict[int, int], model: nn.Module) -> dict[str, int]:
    """Expand layer -> bits to every decoder Linear of each layer."""
    return {e.key: layer_bits[e.layer] for e in decoder_linears(model) if e.layer in layer_bits}
