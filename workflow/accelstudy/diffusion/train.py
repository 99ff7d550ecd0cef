"""One strong-scaling point on this rank: `python -m accelstudy.diffusion.train --point JSON
--data PAIRS.npz --out RESULT.json --samples PANEL.npz`, under a launcher or alone.

The authors' SR3 port as a plain loop: DDP, a distributed sampler, Adam, nothing else timed;
fixed work `total_iterations` = iterations x ranks, then rank 0 checks quality (untimed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from accelstudy import ranks
from accelstudy.data.dust import load_pairs
from accelstudy.device import DTYPES, Device, resolve
from accelstudy.diffusion import quality, sr3
from accelstudy.files import atomic_open
from accelstudy.records import package_versions

BACKENDS = {"cuda": "nccl", "hpu": "hccl", "cpu": "gloo"}
CPU_PEAK = "RSS growth: getrusage ru_maxrss at the end minus the RSS before the model is built"
LOSS_NOTE = "mean |noise - predicted| per pixel (the summed L1 is optimised)"
MAX_LOSSES = 200  # the record keeps at most this many, evenly spaced


def start_process_group(device: Device) -> None:
    if device.kind == "hpu":
        import habana_frameworks.torch.distributed.hccl  # noqa: F401  (registers hccl)
    if device.kind == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group(BACKENDS[device.kind])


def iterations_for(point: dict[str, Any], world: int) -> int:
    """Strong scaling: the fixed work is iterations x ranks, as the authors' n_iter."""
    return math.ceil(point["total_iterations"] / world)


def batches(loader: DataLoader, sampler: DistributedSampler):
    """Endless (epoch, batch) pairs, reshuffled each epoch as the sampler does it."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for batch in loader:
            yield epoch, batch
        epoch += 1


def run_point(point: dict[str, Any], data: Path, samples: Path) -> dict[str, Any]:
    """Train this rank's share of the fixed work; rank 0 also checks the quality."""
    device = resolve(point.get("device", "auto"))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    start_process_group(device)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    pairs = load_pairs(data)
    size = pairs["hr"].shape[-1]
    torch.manual_seed(point["seed"])  # every rank builds the same network
    baseline = psutil.Process().memory_info().rss
    device.reset_peak_memory()
    dtype = DTYPES[point["dtype"]]
    unet = sr3.build_unet(point["model"], size).to(device.torch, dtype)
    table = sr3.sqrt_alpha_bar_prev(sr3.scheduler(point["schedule"]))
    dataset = TensorDataset(pairs["lr"], pairs["hr"], torch.arange(len(pairs["hr"])))
    sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=point["seed"],
                                 drop_last=True)  # fmt: skip
    loader = DataLoader(dataset, batch_size=point["batch_per_device"], sampler=sampler,
                        drop_last=True)  # fmt: skip
    stream = batches(loader, sampler)
    torch.manual_seed(point["seed"] + rank)  # each rank its own noise
    lr, hr, _ = next(iter(loader))
    probe = hr.to(device.torch, dtype), sr3.upsample(lr, size).to(device.torch, dtype)
    flops = sr3.flops_per_image(unet, table, *probe)
    model = DistributedDataParallel(unet)
    optimizer = torch.optim.Adam(model.parameters(), lr=point["learning_rate"])
    iterations, warmup = iterations_for(point, world), point["warmup_iterations"]
    losses, seen = [], []
    device.synchronize()
    begin = warm = time.perf_counter()
    for step in range(1, iterations + 1):
        epoch, (lr, hr, index) = next(stream)
        if epoch == 0:
            seen.extend(index.tolist())
        hr, lr = hr.to(device.torch, dtype), lr.to(device.torch, dtype)
        loss = sr3.training_loss(model, table, hr, sr3.upsample(lr, size))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        device.mark_step()
        optimizer.step()
        device.mark_step()
        losses.append(loss.detach())
        ranks.killed_at(step)  # the test hook: dies here as a preempted job would
        if step == warmup:
            device.synchronize()
            warm = time.perf_counter()
    device.synchronize()
    end = time.perf_counter()
    peak = device.peak_memory_bytes()
    per_pixel = (torch.stack(losses).float() / hr.numel()).tolist()
    measured = {
        "device": device.kind, "world_size": world, "iterations": iterations,
        "runtime_s": end - begin, "timed_s": end - warm, "timed_iterations": iterations - warmup,
        "losses": per_pixel, "seen": seen, "flops_per_image": flops,
        "parameters": sr3.parameter_count(unet),
        "peak_memory_bytes": peak - baseline if device.kind == "cpu" else peak,
    }  # fmt: skip
    if rank == 0:
        measured["quality"] = check_quality(unet, point, pairs, samples)
    return measured


def check_quality(unet, point: dict[str, Any], pairs: dict[str, torch.Tensor],
                  samples: Path) -> dict[str, float]:  # fmt: skip
    """PSNR and SSIM of SR samples and bicubic against the truth; the images go to the panel."""
    count = point["quality"]["images"]
    lr, hr = pairs["lr_val"][:count], pairs["hr_val"][:count]
    size = hr.shape[-1]
    parameter = next(unet.parameters())
    unet.eval()
    sr = sr3.super_resolve(unet, sr3.scheduler(point["schedule"]),
                           lr.to(parameter.device, parameter.dtype), size,
                           point["quality"]["sampling_steps"], seed=point["seed"])  # fmt: skip
    sr = sr.float().cpu()
    bicubic = sr3.upsample(lr, size).clamp(-1, 1)
    with atomic_open(samples, "wb") as handle:
        np.savez(handle, lr=lr.numpy(), sr=sr.numpy(), bicubic=bicubic.numpy(), hr=hr.numpy())
    return {
        **{f"{k}_sr": v for k, v in quality.scores(sr, hr).items()},
        **{f"{k}_bicubic": v for k, v in quality.scores(bicubic, hr).items()},
        "images": len(hr), "sampling_steps": point["quality"]["sampling_steps"],
    }  # fmt: skip


def summarise(point: dict[str, Any], measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The point's result: rank 0's clock, loss and quality; every rank's memory and images."""
    first = measured[0]
    per_iteration = point["batch_per_device"] * first["world_size"]
    images_per_s = first["timed_iterations"] * per_iteration / first["timed_s"]
    seen = [set(m["seen"]) for m in measured]
    shared = sum(len(a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    stride = max(1, len(first["losses"]) // MAX_LOSSES)
    metrics = {
        "train_runtime_s": first["runtime_s"], "iterations": first["iterations"],
        "images_processed": first["iterations"] * per_iteration,
        "warmup_iterations": point["warmup_iterations"], "images_per_s": images_per_s,
        "flops_per_image": first["flops_per_image"],
        "achieved_flops_per_s": images_per_s * first["flops_per_image"],
        "parameters": first["parameters"], "final_loss": first["losses"][-1],
        "losses": first["losses"][::stride], "loss": LOSS_NOTE,
        "peak_memory_per_rank": [m["peak_memory_bytes"] for m in measured],
        "peak_memory_bytes": max(m["peak_memory_bytes"] for m in measured),
        "peak_memory_method": CPU_PEAK if first["device"] == "cpu" else "max_memory_allocated",
        "first_epoch_images_per_rank": [len(s) for s in seen],
        "first_epoch_images_shared": shared, **first["quality"],
    }  # fmt: skip
    return {"status": "ok", "device": first["device"], "world_size": first["world_size"],
            "metrics": metrics, "versions": package_versions()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--point", type=json.loads, required=True, help="the scaling point")
    parser.add_argument("--data", type=Path, required=True, help="the prepared pairs (npz)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=Path, required=True, help="the image panel (npz)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return ranks.run(
        args.point, args.out,
        work=lambda: run_point(args.point, args.data, args.samples),
        summarise=lambda measured: summarise(args.point, measured),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
