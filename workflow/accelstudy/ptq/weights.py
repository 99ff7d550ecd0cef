"""How a recipe stores decoder Linears: fake quantized in FP32, or truly low precision (swapped)."""

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from accelstudy.ptq.prune import decoder_linears

FP8_FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def quantize_dequantize(
    weight: torch.Tensor, bits: int, group_size=128, symmetric=True
) -> torch.Tensor:
    """Zero-padded groups along the input. Symmetric: scale = max|w| / (2^(b-1) - 1), zero point 0;
    asymmetric: scale = (max - min) / (2^b - 1), zero point = round(-min / scale)."""
    if not 2 <= bits <= 16:
        raise ValueError(f"bits must be in 2..16, got {bits}")
    out_features, in_features = weight.shape
    pad = (-in_features) % group_size
    w = F.pad(weight.float(), (0, pad)).view(out_features, -1, group_size)
    low = w.amin(-1, keepdim=True)
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        scale, lowest = w.abs().amax(-1, keepdim=True) / qmax, -qmax - 1
    else:
        qmax, lowest = 2**bits - 1, 0
        scale = (w.amax(-1, keepdim=True) - low) / qmax
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    zero = 0 if symmetric else torch.round(-low / scale)
    deq = (torch.clamp(torch.round(w / scale) + zero, lowest, qmax) - zero) * scale
    return deq.view(out_features, -1)[:, :in_features].to(weight.dtype)


@torch.no_grad()
def fake_quantize(
    model: PreTrainedModel, module_bits: Mapping[str, int | None], group_size=128, symmetric=True
) -> int:
    """Quantize-dequantize decoder Linears to their bits in place (None: FP32); how many changed."""
    entries = decoder_linears(model)
    chosen = [(e.linear.weight, b) for e in entries if (b := module_bits.get(e.key)) is not None]
    for weight, bits in chosen:
        weight.copy_(quantize_dequantize(weight, bits, group_size, symmetric))
    return len(chosen)


def layer_map(layer_bits: dict[int, int], model: PreTrainedModel) -> dict[str, int]:
    """Expand layer -> bits to every decoder Linear of each layer."""
    return {e.key: layer_bits[e.layer] for e in decoder_linears(model) if e.layer in layer_bits}


class GroupQuantLinear(nn.Module):
    """Symmetric int8 (or int4, packed two per byte) weights with float16 group scales."""

    qweight: torch.Tensor
    scales: torch.Tensor

    def __init__(self, linear: nn.Linear, bits: int, group_size: int = 128):
        super().__init__()
        if bits not in (4, 8):
            raise ValueError(f"real integer quantization supports 4 or 8 bits, got {bits}")
        self.bits, self.group_size = bits, group_size
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()
        pad = (-self.in_features) % group_size
        groups = F.pad(weight, (0, pad)).view(self.out_features, -1, group_size)
        qmax = 2 ** (bits - 1) - 1
        scale = groups.abs().amax(-1, keepdim=True) / qmax
        scale = torch.where(scale == 0, torch.ones_like(scale), scale).half()
        q = torch.clamp(torch.round(groups / scale.float()), -qmax - 1, qmax).to(torch.int8)
        q = q.view(self.out_features, -1)
        if bits == 4:  # two signed nibbles per byte
            q = ((q[:, 0::2] & 0x0F) | ((q[:, 1::2] & 0x0F) << 4)).to(torch.uint8)
        self.register_buffer("qweight", q.contiguous())
        self.register_buffer("scales", scale.squeeze(-1).contiguous())
        self.bias = linear.bias

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        q = self.qweight
        if self.bits == 4:  # each byte's two nibbles back to signed int4, low one first
            nibbles = torch.stack([q & 0x0F, (q >> 4) & 0x0F], dim=-1).to(torch.int8)
            q = torch.where(nibbles > 7, nibbles - 16, nibbles).view(self.out_features, -1)
        groups = q.view(self.out_features, -1, self.group_size).to(dtype)
        weight = groups * self.scales.to(dtype)[..., None]
        return weight.view(self.out_features, -1)[:, : self.in_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantized(x.dtype), self.bias)


class CastLinear(nn.Module):
    """Weights stored in float16, bfloat16 or float8 (per-channel scale), cast for the matmul."""

    weight: torch.Tensor
    scale: torch.Tensor | None

    def __init__(self, linear: nn.Linear, dtype: torch.dtype):
        super().__init__()
        weight, scale = linear.weight.detach().float(), None
        if dtype in FP8_FORMATS.values():
            scale = weight.abs().amax(1, keepdim=True).clamp(min=1e-12) / torch.finfo(dtype).max
            weight = weight / scale
        self.register_buffer("scale", scale)  # None: not in the state dict
        self.register_buffer("weight", weight.to(dtype))
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(x.dtype)
        if self.scale is not None:
            weight = weight * self.scale.to(x.dtype)
        return F.linear(x, weight, self.bias)


@torch.no_grad()
def quantize_nvidia(model: PreTrainedModel, module_bits: dict[str, int], group_size=128) -> None:
    """Per decoder Linear: 16 -> float16 storage; 8 -> int8 groups; 4 -> packed int4 groups."""
    for entry in decoder_linears(model):
        bits = module_bits[entry.key]
        if bits >= 16:
            module: nn.Module = CastLinear(entry.linear, torch.float16)
        else:
            module = GroupQuantLinear(entry.linear, 8 if bits > 4 else 4, group_size)
        entry.parent.set_submodule(entry.name, module)


@torch.no_grad()
def quantize_fp8_standin(model: PreTrainedModel, dtypes: dict[str, str], fp8_format: str) -> None:
    """`dtypes`: 'layer-07.mlp.down_proj' (or 'layer-07') -> 'bf16' | 'fp8'."""
    fp8 = FP8_FORMATS[fp8_format]
    for entry in decoder_linears(model):
        choice = dtypes.get(entry.key, dtypes.get(f"layer-{entry.layer:02d}", "bf16"))
        dtype = fp8 if choice == "fp8" else torch.bfloat16
        entry.parent.set_submodule(entry.name, CastLinear(entry.linear, dtype))


FP8_BLOCKLIST = ["lm_head", "model.norm", "model.embed_tokens"]


def quantize_fp8_inc(
    load_model: Callable[[], nn.Module],
    fp8_modules: list[str],
    fp8_format: str,
    calibrate: Callable[[nn.Module], None],
    stats: str,
) -> nn.Module:
    """Intel Neural Compressor FP8 on a Gaudi: MEASURE (`calibrate`), then QUANTIZE a new model."""
    import neural_compressor.torch.quantization as inc

    common: dict[str, Any] = {"fp8_config": fp8_format.upper(), "hp_dtype": "bf16"}
    common["dump_stats_path"] = f"{stats}/inc"
    common["allowlist"] = {"names": list(fp8_modules), "types": []}
    common["blocklist"] = {"names": FP8_BLOCKLIST, "types": []}
    measured = inc.prepare(load_model(), inc.FP8Config(mode="MEASURE", observer="maxabs", **common))
    calibrate(measured)
    inc.finalize_calibration(measured)
    del measured
    quantize = inc.FP8Config(mode="QUANTIZE", scale_method="maxabs_hw", **common)
    return inc.convert(load_model(), quantize)


def bits_per_weight(bits: int, group_size: int = 128) -> float:
    """Accounting of the NVIDIA recipe: FP16 = 16 bits; INT8 = 8 + 16/128 bits per weight."""
    return 16.0 if bits >= 16 else (8 if bits > 4 else 4) + 16 / group_size
