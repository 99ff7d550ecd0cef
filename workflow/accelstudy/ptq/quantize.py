"""The `quantize` stage: quantize by an assignment and a recipe, evaluate, write the record."""

import json
import math
import os
import pkgutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import AutoTokenizer, PreTrainedModel

from accelstudy import random_source
from accelstudy.data.sources import read_prepared
from accelstudy.device import DTYPES
from accelstudy.evaluate.baseline import EvalJob
from accelstudy.models import load_prepared
from accelstudy.options import default
from accelstudy.points import bits_label
from accelstudy.ptq import RecipeDeviceError, SensitivityTableError, weights
from accelstudy.ptq.prune import decoder_layers, decoder_linears
from accelstudy.ptq.sensitivity import build_calibration
from accelstudy.recipes import RECIPES
from accelstudy.snapshots import fp32_bytes, weights_dir


@dataclass(kw_only=True)
class QuantJob(EvalJob):
    """The `quantize` stage's flags: the evaluation job's, the assignment, the recipe's."""

    recipe: str
    assignment: Path
    group_size: int = default("ptq.group_size")
    symmetric: bool = default("ptq.symmetric")
    calibration: Path | None = None  # the calibration split, for the FP8 MEASURE pass
    fp8_format: str = default("ptq.fp8_format")
    fp8_without_hpu: str = default("ptq.fp8_without_hpu")

    @property
    def random(self) -> bool:
        """Random weights: made on the device, paper-sized, and never on disk to count."""
        return random_source.is_random(self.model_dir)

    def stored_bytes(self, model: nn.Module) -> int:
        """saved_bytes; random weights' counted, not written (a 70B's would not fit a disk)."""
        return saved_bytes(model, written=not self.random)


def paper_ratio(shapes_and_bits: Iterable[tuple[tuple[int, int], int]], group_size=128) -> float:
    """FP32 bits / (b bits per weight + a 16-bit scale per group) over the quantized (out, in)s."""
    counts = [(o * i, o * math.ceil(i / group_size), b) for (o, i), b in shapes_and_bits]
    return sum(32 * n for n, _, _ in counts) / sum(b * n + 16 * groups for n, groups, b in counts)


def state_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict, shared tensors once (under their first name)."""
    tensors: dict[object, tuple[str, torch.Tensor]] = {}  # each storage's first name and tensor
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape)) if tensor.numel() else name
        tensors.setdefault(key, (name, tensor))
    return dict(tensors.values())


def saved_bytes(model: nn.Module, written: bool = True) -> int:
    """Bytes of the model's state dict saved as safetensors (shared tensors counted once); not
    `written`: its tensors' bytes alone (the header's few kB left out)."""
    tensors = state_tensors(model)
    if not written:
        return sum(t.numel() * t.element_size() for t in tensors.values())
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.safetensors")
        save_file({n: t.detach().contiguous().cpu() for n, t in tensors.items()}, path)
        return os.path.getsize(path)


def prepared_bytes(model_dir: Path, model: nn.Module | None = None) -> int:
    """The model's bytes as FP32 safetensors: the uncompressed reference of the ratio; random
    weights, none on disk: 4 bytes for each value of `model` (as made, before any recipe)."""
    if model is not None and random_source.is_random(model_dir):
        return 4 * sum(t.numel() for t in state_tensors(model).values())
    return fp32_bytes(weights_dir(model_dir))


Bits = Mapping[str, int | None]  # decoder Linear -> bits; None: not assigned, kept high precision
# what a recipe returns: the model as evaluated, its stored bytes, the paper's ratio, a note
RecipeResult = tuple[nn.Module, int, float, str]


def stored_ratio(model: PreTrainedModel, bits_per_weight: Mapping[str, float]) -> float:
    """FP32 bits over the bits the decoder Linears are stored in (key -> bits per weight)."""
    n = {e.key: e.linear.weight.numel() for e in decoder_linears(model)}
    return 32 * sum(n.values()) / sum(n[key] * b for key, b in bits_per_weight.items())


def fake(job: QuantJob, model: PreTrainedModel, bits: Bits) -> RecipeResult:
    """Simulated: the weights stay FP32, so the stored bytes are the prepared model's."""
    shapes = {e.key: (e.linear.out_features, e.linear.in_features) for e in decoder_linears(model)}
    weights.fake_quantize(model, bits, job.group_size, job.symmetric)
    ratio = paper_ratio([(shapes[k], b) for k, b in bits.items() if b is not None], job.group_size)
    return (
        model,
        prepared_bytes(job.model_dir, model),
        ratio,
        "simulated: quantize-dequantize in FP32",
    )


def compute_in(model: nn.Module, dtype: torch.dtype) -> None:
    """Activations and all weights but stored low-precision ones (cast per matmul) in `dtype`."""
    stored = (weights.CastLinear, weights.GroupQuantLinear)
    for module in (m for m in model.modules() if not isinstance(m, stored)):
        for tensor in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            if tensor.is_floating_point() and tensor.element_size() > 1:  # not FP8 storage
                tensor.data = tensor.data.to(dtype)


def nvidia(job: QuantJob, model: PreTrainedModel, bits: Bits) -> RecipeResult:
    module_bits = {key: 16 if b is None else b for key, b in bits.items()}
    per_weight = {k: weights.bits_per_weight(b, job.group_size) for k, b in module_bits.items()}
    ratio = stored_ratio(model, per_weight)  # before the Linears are swapped out
    weights.quantize_nvidia(model, module_bits, job.group_size)
    note = "FP16 / INT8 / packed INT4 storage, dequantized before each matmul"
    return model, job.stored_bytes(model), ratio, note


def fp8(job: QuantJob, model: PreTrainedModel, bits: Bits) -> RecipeResult:
    """The Gaudi recipe: the high-precision cluster (bits >= 16) in BF16, the rest in FP8."""
    fp8_keys = [key for key, b in bits.items() if b is not None and b < 16]
    ratio = stored_ratio(model, {key: 8 if key in fp8_keys else 16 for key in bits})
    if job.device.spec.habana:
        quantized = fp8_on_hpu(job, model, fp8_keys)
        note = f"Intel Neural Compressor FP8 ({job.fp8_format}) MEASURE + QUANTIZE on HPU"
        return quantized, job.stored_bytes(quantized), ratio, note
    dtypes = {key: "fp8" if key in fp8_keys else "bf16" for key in bits}
    weights.quantize_fp8_standin(model, dtypes, job.fp8_format)
    note = f"stand-in: torch float8 ({job.fp8_format}) weights with per-channel scales; no HPU"
    return model, job.stored_bytes(model), ratio, note


def fp8_on_hpu(job: QuantJob, model: PreTrainedModel, fp8_keys: list[str]) -> nn.Module:
    """INC's MEASURE on 512 calibration blocks or items, then QUANTIZE; each loads fresh BF16."""
    if job.calibration is None:
        raise ValueError("recipe 'fp8' on an HPU needs --calibration: the FP8 MEASURE pass's rows")
    full_names = {module: name for name, module in model.named_modules()}
    names = [full_names[e.linear] for e in decoder_linears(model) if e.key in fp8_keys]
    tokenizer = AutoTokenizer.from_pretrained(str(weights_dir(job.model_dir)))
    rows = read_prepared(job.calibration)
    batches = build_calibration(tokenizer, job.task, rows, 512, job.settings).batches

    def calibrate(prepared_model: nn.Module) -> None:
        for batch in batches:
            prepared_model(batch.to(job.device.torch))
            job.device.mark_step()

    def fresh_bf16() -> nn.Module:
        device = job.device.torch
        return load_prepared(job.model_dir, torch.bfloat16, device)[0].to(device)

    stats = str(job.out.parent)
    return weights.quantize_fp8_inc(fresh_bf16, names, job.fp8_format, calibrate, stats)


def bf16(job: QuantJob, model: nn.Module, bits: Bits) -> RecipeResult:
    model.to(torch.bfloat16)
    return model, job.stored_bytes(model), 2.0, "whole model in bfloat16 (the CPU recipe)"


def module_assignment(model: PreTrainedModel, spec: dict[str, Any], source: Path) -> Bits:
    """Decoder Linear -> bits; None (kept high precision) where a one-family scan left it out."""
    keys, what = [entry.key for entry in decoder_linears(model)], f"assignment '{source}'"
    if "module_bits" in spec:
        if unknown := sorted(set(spec["module_bits"]) - set(keys)):
            raise SensitivityTableError(f"{what} names modules the model lacks: {unknown[:3]}")
        return {key: spec["module_bits"].get(key) for key in keys}
    layer_bits = {int(k): v for k, v in spec["layer_bits"].items()}
    layers = len(decoder_layers(model))
    if sorted(layer_bits) != list(range(layers)):
        raise SensitivityTableError(f"{what} has {len(layer_bits)} layers; the model has {layers}")
    return weights.layer_map(layer_bits, model)


def quantize(**flags: Any) -> dict[str, Any]:
    """Quantize the prepared model per the assignment and recipe; evaluate; write a record."""
    job = QuantJob.from_flags(**flags)
    if job.recipe not in RECIPES:
        raise ValueError(f"unknown recipe '{job.recipe}'; expected one of {tuple(RECIPES)}")
    recipe = RECIPES[job.recipe]
    if recipe.habana and not job.device.spec.habana and job.fp8_without_hpu == "error":
        raise RecipeDeviceError(
            f"recipe '{job.recipe}' needs Intel Neural Compressor on an HPU, but the device is "
            f"'{job.device.kind}'; set ptq.fp8_without_hpu: standin to run the float8 stand-in"
        )
    asked = recipe.compute_dtype or job.settings.get("dtype") or "float32"
    compute_dtype = job.resolve_dtype(asked, job.device.kind)
    # read weights are quantized from FP32 on the CPU; random ones, made in the computing dtype
    # on the device (no FP32 to be faithful to), are quantized there
    made_in = DTYPES[compute_dtype] if job.random else None
    model, tokenizer = load_prepared(job.model_dir, made_in, job.device.torch)
    reference = prepared_bytes(job.model_dir, model)
    spec = json.loads(Path(job.assignment).read_text())
    bits = module_assignment(model, spec, job.assignment)
    model, stored, ratio, note = pkgutil.resolve_name(recipe.function)(job, model, bits)
    compute_in(model, DTYPES[compute_dtype])
    metrics = job.evaluate(model, tokenizer, "paper")
    metrics["compression_ratio"] = round(ratio, 4)
    metrics.update(model_compression_ratio=round(reference / stored, 4), stored_bytes=stored)
    parameters = {"bits": spec["bits"], "method": spec["method"], "recipe": job.recipe}
    parameters["fp8_format"] = job.fp8_format if "fp8_format" in recipe.options else None
    parameters |= {"remainder": spec.get("remainder"), "sensitivity": spec.get("sensitivity")}
    parameters |= {"group_size": job.group_size, "symmetric": job.symmetric, "limit": job.limit}
    parameters["assignment"] = spec.get("layer_bits", spec.get("module_bits"))
    parameters |= {"settings": job.settings, "note": note, "compute_dtype": compute_dtype}
    method = f"{job.recipe} {bits_label(spec['bits'])}"
    measured = {"protocol": "paper", "parameters": parameters, "metrics": metrics}
    return job.write(job.measured(stage="quantized", method=method, **measured))


def quantize_recipes(*, runs: list[dict[str, Any]], **shared: Any) -> list[dict[str, Any]]:
    """The quantize job: one bit list's assignment under every recipe (`runs`: each one's
    recipe, record and items) in one process; each recipe quantizes a fresh load."""
    return [quantize(**shared, **run) for run in runs]
