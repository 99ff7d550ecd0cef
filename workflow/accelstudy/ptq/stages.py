"""The PTQ stages as functions: sensitivity chunk, gather, cluster, quantize-and-evaluate."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from accelstudy import device as devices
from accelstudy.config import config_hash
from accelstudy.data.sources import read_prepared
from accelstudy.evaluate import evaluate_task
from accelstudy.models import load_prepared
from accelstudy.ptq import accounting, real_quant
from accelstudy.ptq.calibration import Calibration, choice_calibration, perplexity_calibration
from accelstudy.ptq.clustering import assign_bits
from accelstudy.ptq.fake_quant import fake_quantize, layer_map
from accelstudy.ptq.prune import decoder_layers, decoder_linears, targets
from accelstudy.ptq.sensitivity import scan
from accelstudy.files import atomic_open, write_json
from accelstudy.records import job_record, write_record

RECIPE_NAMES = ("fake", "nvidia", "fp8", "bf16")
SCAN_KEYS = ("granularity", "family", "sparsity", "calibration_limit")  # a sensitivity scan's


class SensitivityTableError(ValueError):
    """A sensitivity table that does not describe the model's layers."""


class RecipeDeviceError(ValueError):
    """A real-quantization recipe asked of a device that cannot run it."""


def chunk_targets(all_targets: list, chunks: int, index: int) -> list:
    """The index-th of `chunks` near-equal consecutive slices."""
    size, extra = divmod(len(all_targets), chunks)
    start = index * size + min(index, extra)
    return all_targets[start : start + size + (1 if index < extra else 0)]


def build_calibration(tokenizer, task: str, rows: list[dict], limit: int | None,
                      settings: dict[str, Any]) -> Calibration:  # fmt: skip
    if task == "wikitext":
        return perplexity_calibration(
            tokenizer, rows, settings["block_size"], settings["batch_size"], limit
        )
    return choice_calibration(tokenizer, task, rows, limit, settings[f"{task}_max_length"])


def sensitivity_chunk(*, model_dir: Path, task: str, data: Path, limit: int | None,
                      settings: dict[str, Any], granularity: str, family: str, sparsity: float,
                      chunks: int, chunk: int, prefix_reuse: bool, out: Path,
                      device_kind: str = "auto") -> dict:  # fmt: skip
    """Prune each target of one chunk in turn; write its scores."""
    device = devices.resolve(device_kind)
    model, tokenizer = load_prepared(model_dir)
    model.to(device.torch)
    calibration = build_calibration(tokenizer, task, read_prepared(data), limit, settings)
    all_targets = targets(model, granularity, family)
    mine = chunk_targets(all_targets, chunks, chunk)
    base, scores, timing = scan(model, calibration, mine, sparsity, prefix_reuse)
    payload = {
        "task": task, "metric": calibration.kind, "base": base, "granularity": granularity,
        "family": family, "sparsity": sparsity, "calibration_limit": limit, "chunk": chunk,
        "chunks": chunks,
        "n_targets": len(all_targets), "prefix_reuse": prefix_reuse, "device": device.kind,
        "scores": [s.__dict__ for s in scores], **timing,
    }  # fmt: skip
    write_json(out, payload)
    return payload


def gather_sensitivity(chunks: list[Path], out: Path) -> pd.DataFrame:
    """Chunks -> one table (target, layer, metric, score), checked to be complete."""
    parts = [json.loads(Path(p).read_text()) for p in chunks]
    frame = pd.DataFrame([s for part in parts for s in part["scores"]])
    frame = frame.assign(base=parts[0]["base"], metric_kind=parts[0]["metric"],
                         **{key: parts[0].get(key) for key in SCAN_KEYS})  # fmt: skip
    frame.insert(0, "task", parts[0]["task"])
    if len(frame) != parts[0]["n_targets"] or frame["name"].duplicated().any():
        raise SensitivityTableError(
            f"sensitivity chunks hold {len(frame)} targets, expected {parts[0]['n_targets']}"
        )
    with atomic_open(out) as handle:
        frame.sort_values("name").to_csv(handle, index=False)
    return frame


def cluster(*, table: Path, bits: list[int], method: str, remainder: str, n_layers: int,
            out: Path, seed: int = 0) -> dict[str, int]:  # fmt: skip
    """Layer -> bits (or module -> bits) from the sensitivity table."""
    frame = pd.read_csv(table)
    layers = sorted(frame["layer"].unique())
    if layers != list(range(n_layers)):
        raise SensitivityTableError(
            f"sensitivity table '{table}' covers layers {layers[:3]}..., but the model has "
            f"{n_layers} decoder layers; re-run the sensitivity stage for this model"
        )
    assignment = assign_bits(
        list(frame["name"]), list(frame["score"]), bits, method, remainder, seed
    )
    # what the scores were measured with, so a quantized record says what its bits depend on
    scanned = json.loads(frame[[k for k in SCAN_KEYS if k in frame]].iloc[0].to_json())
    payload: dict[str, Any] = {"bits": bits, "method": method, "remainder": remainder,
                               "sensitivity": scanned}  # fmt: skip
    if "." in str(frame["name"].iloc[0]):  # submodule scores: a module-to-bits map
        payload["module_bits"] = dict(sorted(assignment.items()))
    else:
        layer_bits = {int(name.split("-")[1]): b for name, b in assignment.items()}
        payload["layer_bits"] = {str(k): v for k, v in sorted(layer_bits.items())}
    write_json(out, payload)
    return assignment


def module_assignment(model, spec: dict[str, Any], source: Path) -> dict[str, int | None]:
    """Every decoder Linear ('layer-07.mlp.up_proj') -> its bits; None where the assignment
    does not cover it (a submodule scan of one family), which then stays high precision."""
    keys = [entry.key for entry in decoder_linears(model)]
    if "module_bits" in spec:
        unknown = sorted(set(spec["module_bits"]) - set(keys))
        if unknown:
            raise SensitivityTableError(
                f"assignment '{source}' names modules the model lacks: {unknown[:3]}"
            )
        return {key: spec["module_bits"].get(key) for key in keys}
    layer_bits = {int(k): v for k, v in spec["layer_bits"].items()}
    if sorted(layer_bits) != list(range(len(decoder_layers(model)))):
        raise SensitivityTableError(
            f"assignment '{source}' has {len(layer_bits)} layers; the model has "
            f"{len(decoder_layers(model))}"
        )
    return layer_map(layer_bits, model)


def quantized_eval(*, study: str, system: str, model_name: str, model_dir: Path, task: str,
                   data: Path, data_source: str, settings: dict[str, Any], limit: int | None,
                   assignment: Path, recipe: str, group_size: int, symmetric: bool, out: Path,
                   device_kind: str = "auto", calibration: Path | None = None,
                   fp8_format: str = "e4m3", fp8_without_hpu: str = "standin") -> dict:  # fmt: skip
    """Quantize the prepared model per the assignment and recipe; evaluate; write a record."""
    started = time.perf_counter()
    device = devices.resolve(device_kind)
    if recipe == "fp8" and device.kind != "hpu" and fp8_without_hpu == "error":
        raise RecipeDeviceError(
            f"recipe 'fp8' needs Intel Neural Compressor on an HPU, but the device is "
            f"'{device.kind}'; set ptq.fp8_without_hpu: standin to run the float8 stand-in"
        )
    model, tokenizer = load_prepared(model_dir)
    spec = json.loads(Path(assignment).read_text())
    module_bits = module_assignment(model, spec, assignment)
    shapes = accounting.linear_shapes(model)
    sizes = {key: rows * columns for key, (rows, columns) in shapes.items()}
    fp32_bytes = accounting.prepared_bytes(model_dir)
    high = {key: 16 if bits is None else bits for key, bits in module_bits.items()}
    if recipe == "fake":
        fake_quantize(model, module_bits, group_size, symmetric)
        stored_bytes = fp32_bytes  # simulated: weights stay FP32
        quantized = [(shapes[k], b) for k, b in module_bits.items() if b is not None]
        ratio = accounting.paper_ratio(quantized, group_size)
        note = "simulated: quantize-dequantize in FP32"
    elif recipe == "nvidia":
        real_quant.quantize_nvidia(model, high, group_size)
        stored_bytes = accounting.saved_bytes(model)
        bits_stored = sum(
            sizes[k] * real_quant.bits_per_weight(b, group_size) for k, b in high.items()
        )
        ratio = 32 * sum(sizes.values()) / bits_stored
        note = "FP16 / INT8 / packed INT4 storage, dequantized before each matmul"
    elif recipe == "fp8":
        # the Gaudi recipe: the high-precision cluster (bits >= 16) in BF16, the rest in FP8
        fp8_keys = [k for k, b in high.items() if b < 16]
        n, n_fp8 = sum(sizes.values()), sum(sizes[k] for k in fp8_keys)
        ratio = 32 * n / (16 * (n - n_fp8) + 8 * n_fp8)
        if device.kind == "hpu":
            names = [m for key in fp8_keys for m in real_quant.module_names(model, key)]
            calibration_rows = read_prepared(calibration)
            batches = build_calibration(tokenizer, task, calibration_rows, 512, settings).batches

            def calibrate(prepared_model):
                for batch in batches:
                    prepared_model(batch.to(device.torch))
                    device.mark_step()

            def fresh_bf16():
                return load_prepared(model_dir, dtype=torch.bfloat16)[0].to(device.torch)

            model = real_quant.quantize_fp8_inc(
                fresh_bf16, names, fp8_format, calibrate, str(out.parent)
            )
            note = f"Intel Neural Compressor FP8 ({fp8_format}) MEASURE + QUANTIZE on HPU"
        else:
            dtypes = {k: "fp8" if k in fp8_keys else "bf16" for k in high}
            real_quant.quantize_fp8_standin(model, dtypes, fp8_format)
            note = f"stand-in: torch float8 ({fp8_format}) weights with per-channel scales; no HPU"
        stored_bytes = accounting.saved_bytes(model)
    elif recipe == "bf16":
        model.to(torch.bfloat16)
        stored_bytes = accounting.saved_bytes(model)
        ratio = 2.0
        note = "whole model in bfloat16 (the CPU recipe)"
    else:
        raise ValueError(f"unknown recipe '{recipe}'; expected one of {RECIPE_NAMES}")
    model.to(device.torch)
    rows = read_prepared(data)
    metrics, _ = evaluate_task(model, tokenizer, task, "paper", rows, settings, device, limit)
    metrics.update(compression_ratio=round(ratio, 4),
                   model_compression_ratio=round(fp32_bytes / stored_bytes, 4),
                   stored_bytes=stored_bytes)  # fmt: skip
    bits_label = "[" + ",".join(str(b) for b in spec["bits"]) + "]"
    parameters = {"bits": spec["bits"], "method": spec["method"], "recipe": recipe,
                  "fp8_format": fp8_format if recipe == "fp8" else None,
                  "remainder": spec.get("remainder"), "sensitivity": spec.get("sensitivity"),
                  "group_size": group_size, "symmetric": symmetric, "limit": limit,
                  "assignment": spec.get("layer_bits", spec.get("module_bits")),
                  "settings": settings, "note": note}  # fmt: skip
    record = job_record(
        stage="quantized", study=study, system=system, device=device, model=model_name,
        task=task, method=f"{recipe} {bits_label}", protocol="paper", data_source=data_source,
        parameters=parameters, metrics=metrics, config_hash=config_hash(parameters),
        wall_s=time.perf_counter() - started,
    )  # fmt: skip
    write_record(out, record)
    return record
