"""Compression: the paper's ratio over quantized Linear weights, and measured model bytes."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from safetensors.torch import save_file
from torch import nn

from accelstudy.ptq.prune import decoder_linears


def paper_ratio(
    shapes_and_bits: Iterable[tuple[tuple[int, int], int]], group_size: int = 128
) -> float:
    """FP32 bits / (b x n + 16 x n_groups) summed over the quantized Linear weights: a weight
    (out, in) has n = out x in values and out x ceil(in / group) groups, each a 16-bit scale."""
    fp32 = quantized = 0
    for (out_features, in_features), bits in shapes_and_bits:
        n = out_features * in_features
        groups = out_features * math.ceil(in_features / group_size)
        fp32 += 32 * n
        quantized += bits * n + 16 * groups
    return fp32 / quantized


def saved_bytes(model: nn.Module) -> int:
    """Bytes of the model's state dict saved as safetensors (shared tensors counted once)."""
    seen, tensors = set(), {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        tensors[name] = tensor.detach().contiguous().cpu()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.safetensors")
        save_file(tensors, path)
        return os.path.getsize(path)


def linear_shapes(model: nn.Module) -> dict[str, tuple[int, int]]:
    """Decoder Linear key ('layer-07.mlp.up_proj') -> weight shape (out, in)."""
    return {e.key: tuple(e.linear.weight.shape) for e in decoder_linears(model)}


def prepared_bytes(model_dir: Path) -> int:
    """Bytes of the prepared (FP32) model's safetensors files: the uncompressed reference."""
    return sum(f.stat().st_size for f in Path(model_dir).glob("*.safetensors"))
