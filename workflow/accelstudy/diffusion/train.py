"""One strong-scaling point on this rank: the authors' SR3 loop (DDP, Adam) over fixed work."""

import gc

if __name__ == "__main__":  # a rank's program: no collection among its imports (timeline.starting)
    gc.disable()

import argparse
import functools
import itertools
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from accelstudy import ranks, timeline
from accelstudy.data.dust import load_pairs
from accelstudy.device import DTYPES, Device
from accelstudy.diffusion import quality, sr3
from accelstudy.files import atomic_open
from accelstudy.points import DiffusionPoint

LOSS_NOTE = "mean |noise - predicted| per pixel (the summed L1 is optimised)"
MAX_LOSSES = 200  # the record keeps at most this many, evenly spaced


def batches(loader: DataLoader, sampler: DistributedSampler):
    """Endless (epoch, batch) pairs, reshuffled each epoch as the sampler does it."""
    for epoch in itertools.count():
        sampler.set_epoch(epoch)
        yield from ((epoch, batch) for batch in loader)


def run_point(point: DiffusionPoint, data: Path, samples: Path, device: Device) -> ranks.Measured:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    with timeline.phase("device"):
        device.init_process_group()
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    with timeline.phase("data"):
        pairs = load_pairs(data)
    size = pairs["hr"].shape[-1]
    torch.manual_seed(point.seed)  # every rank builds the same network
    baseline = psutil.Process().memory_info().rss
    device.reset_peak_memory()
    dtype = DTYPES[point.dtype]
    with timeline.phase("model"):  # built, not read: no model bytes
        unet = sr3.build_unet(point.model, size).to(device.torch, dtype)
    table = sr3.sqrt_alpha_bar_prev(sr3.scheduler(point.schedule))
    dataset = TensorDataset(pairs["lr"], pairs["hr"], torch.arange(len(pairs["hr"])))
    sampler = DistributedSampler[int](dataset, world, rank, seed=point.seed, drop_last=True)
    loader = DataLoader(dataset, point.batch_per_device, sampler=sampler, drop_last=True)
    stream = batches(loader, sampler)
    torch.manual_seed(point.seed + rank)  # each rank its own noise
    lr, hr, _ = next(iter(loader))
    probe = hr.to(device.torch, dtype), sr3.upsample(lr, size).to(device.torch, dtype)
    flops = sr3.flops_per_image(unet, table, *probe)
    model = DistributedDataParallel(unet)
    optimizer = torch.optim.Adam(model.parameters(), lr=point.learning_rate)
    iterations, warmup = point.iterations_per_device, point.warmup_iterations
    losses, seen = [], []
    device.synchronize()
    begin = warm = time.perf_counter()
    timeline.mark("ready")
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
            timeline.mark("measured")
    device.synchronize()
    end = time.perf_counter()
    timeline.mark("done")
    # this rank's clock and losses (the record keeps rank 0's)
    per_pixel = (torch.stack(losses).float() / hr.numel()).tolist()
    images = point.batch_per_device * world
    images_per_s = (iterations - warmup) * images / (end - warm)
    metrics: dict[str, Any] = {"train_runtime_s": end - begin, "iterations": iterations}
    metrics.update(images_processed=iterations * images, warmup_iterations=warmup)
    metrics.update(images_per_s=images_per_s, flops_per_image=flops)
    metrics.update(achieved_flops_per_s=images_per_s * flops, parameters=unet.num_parameters())
    stride = max(1, len(per_pixel) // MAX_LOSSES)
    metrics.update(final_loss=per_pixel[-1], losses=per_pixel[::stride], loss=LOSS_NOTE)
    peak = device.peak_memory_bytes() - (baseline if device.spec.host else 0)
    measured = {"device": device.kind, "world_size": world, "peak_memory_bytes": peak}
    if rank == 0:
        metrics["quality"] = check_quality(unet, point, pairs, samples)
    return {**measured, "seen": seen, "metrics": metrics}


def check_quality(unet, point: DiffusionPoint, pairs: dict, samples: Path) -> dict[str, float]:
    """PSNR and SSIM of SR samples and bicubic against the truth; the images go to the panel."""
    count, steps = point.quality["images"], point.quality["sampling_steps"]
    lr, hr = pairs["lr_val"][:count], pairs["hr_val"][:count]
    size = hr.shape[-1]
    parameter = next(unet.parameters())
    unet.eval()
    inputs, schedule = lr.to(parameter.device, parameter.dtype), sr3.scheduler(point.schedule)
    sr = sr3.super_resolve(unet, schedule, inputs, size, steps, seed=point.seed).float().cpu()
    bicubic = sr3.upsample(lr, size).clamp(-1, 1)
    with atomic_open(samples, "wb") as handle:
        np.savez(handle, lr=lr.numpy(), sr=sr.numpy(), bicubic=bicubic.numpy(), hr=hr.numpy())
    scores = {f"{k}_sr": v for k, v in quality.scores(sr, hr).items()}
    scores.update({f"{k}_bicubic": v for k, v in quality.scores(bicubic, hr).items()})
    return {**scores, "images": len(hr), "sampling_steps": steps}


def summarise(measured: list[ranks.Measured]) -> dict[str, Any]:
    """The point's result: rank 0's clock, loss and quality; every rank's memory and images."""
    first, seen = measured[0], [set(m["seen"]) for m in measured]
    metrics = ranks.peak_metrics(measured, "before the model is built")
    metrics["first_epoch_images_per_rank"] = [len(s) for s in seen]
    shared = sum(len(a & b) for a, b in itertools.combinations(seen, 2))
    metrics["first_epoch_images_shared"] = shared
    metrics.update(metrics.pop("quality"))
    return {"device": first["device"], "world_size": first["world_size"], "metrics": metrics}


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # a rank's program: its start-up until now is imports
        timeline.imported()
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--point", type=DiffusionPoint.from_json, required=True)
    parser.add_argument("--data", type=Path, required=True, help="the prepared pairs (npz)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=Path, required=True, help="the image panel (npz)")
    args = parser.parse_args(argv)
    work = functools.partial(run_point, args.point, args.data, args.samples)
    return ranks.run(args.point, args.out, work=work, summarise=summarise)


if __name__ == "__main__":
    ranks.exit_now(main())
