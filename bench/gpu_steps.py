"""Fine-tuning throughput and MFU against the per-device batch, and one profiled step.

1. The batch sweep: one DDP LoRA point per per-device batch (1, 2, 4, 8, 16), each an
   `accelstudy finetune` job exactly as the fine-tuning rule runs it (plan, launch, record), on
   one card: TinyLlama-1.1B's shape with random weights (`source: random`, built on the card) on
   a GPU; on a CPU, the tiny random Llama at batches 1 and 2 (--tiny: at batch 2 alone, so
   the drop from one batch to the next is not judged: a smoke run). Per batch: the record's
   steady-state tokens/s and its fraction of peak (`utilization.mfu`, the model FLOPs of
   accelstudy.flops over the card's datasheet peak, or on a CPU the probe's GEMM rate).
2. The profile: one training step of the same model and LoRA recipe at the smallest batch,
   after a warm-up step, under torch.profiler: the time in kernels (the ops' self time on the
   card, or on a CPU the ATen ops' self CPU time) over the step's wall time. What is left is
   the host's share: Python, launches, synchronisation.

Bounds (held by common.judge): every MFU in (0, 1] (a count or a peak that is wrong by a
factor shows here); tokens/s not falling by more than half from one batch to the next larger
(a larger batch that is much slower is a planner or allocator fault); kernel time over step
time in (0, 1].
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import judge, parse_args
from vs_trainer import ROOT, TINY, accelstudy_command, prepare, timed

SHAPES = {  # device kind -> (model name, prepare-model spec, batches)
    "cuda": ("tinyllama-1.1b", {"source": "random", "config": "tinyllama-1.1b"}, (1, 2, 4, 8, 16)),
    "cpu": ("tiny-random", {"source": "tiny-random", "tiny": {}}, (1, 2)),
}
SYSTEMS = {"cuda": "gpu-workstation", "cpu": "cpu"}
BOUNDS = {"mfu_min": (1e-9, None), "mfu_max": (None, 1.0), "tokens_per_s_drop_min": (0.5, None),
          "kernel_fraction": (1e-9, 1.0)}  # fmt: skip


def sweep_point(config: dict, rows: Path, name: str, batch: int, tiny: bool):
    """The default study's DDP point on one card at `batch` per device (--tiny: short blocks)."""
    from accelstudy.points import SweepCell, finetune_point

    cell = SweepCell(name, "ddp", "fused", 1, 0)
    point = finetune_point(config, cell, data_file=str(rows))
    steps = dict(max_steps=6, throughput_warmup_steps=2) if not tiny else {}
    return point.replace(**(TINY if tiny else {}), **steps, per_device_batch=batch, grad_accum=1)


def batch_sweep(kind: str, scratch: Path, tiny: bool, threads: int) -> list[dict]:
    """One record per batch: its tokens/s and MFU."""
    from accelstudy.config import read_config

    config = read_config(ROOT / "config" / "config.yaml")
    name, spec, batches = SHAPES["cpu" if tiny else kind]
    batches = batches[-1:] if tiny else batches
    data = config["finetune"]["data"]
    model, rows = prepare(scratch, spec, config["seed"], data)
    found = []
    for batch in batches:
        point = sweep_point(config, rows, name, batch, tiny)
        out = scratch / f"batch-{batch}.json"
        command = [accelstudy_command(), "finetune", "--study", "bench", "--system",
            SYSTEMS[kind], "--model-name", name, "--model-dir", str(model), "--point",
            point.to_json(), "--data-source", data["source"], "--threads", str(threads),
            "--out", str(out)]  # fmt: skip
        wall = timed(command, out.with_suffix(".log"))
        record = json.loads(out.read_text())
        metrics, use = record["metrics"], record["utilization"]
        speed, mfu, dtype = metrics["tokens_per_s"], use.get("mfu"), use.get("dtype")
        found.append({"batch": batch, "tokens_per_s": speed, "mfu": mfu, "dtype": dtype})
        found[-1]["wall_s"] = wall
        shown = f"{mfu or float('nan'):.4f} ({dtype}), {wall:.1f} s"
        print(f"batch {batch:3d}: {speed:10.1f} tokens/s, MFU {shown}", flush=True)
    return found


def profiled_step(model_dir: Path, kind: str, dtype: str, batch: int, seq_len: int) -> dict:
    """Kernel time over wall time of one LoRA training step (after one unprofiled step)."""
    import torch
    from accelstudy import random_source
    from accelstudy.device import resolve
    from peft import LoraConfig, get_peft_model
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM

    device = resolve(kind)
    options = {"dtype": getattr(torch, dtype)}
    if random_source.is_random(model_dir):
        model = random_source.build(model_dir, device.torch, **options)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), **options)
        model = model.to(device.torch)
    lora = LoraConfig(r=64, lora_alpha=64, lora_dropout=0.05, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(model, lora)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq_len), device=device.torch)

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        device.synchronize()

    step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if kind == "cuda" else [])
    with profile(activities=activities) as trace:
        start = time.perf_counter()
        step()
        wall_us = (time.perf_counter() - start) * 1e6
    events = trace.key_averages()
    if kind == "cuda":
        kernels = sum(e.self_device_time_total for e in events)
    else:  # the ATen ops' own time on the calling thread (their intra-op threads run inside it)
        kernels = sum(e.self_cpu_time_total for e in events if e.key.startswith("aten::"))
    return {"kernel_us": kernels, "step_us": wall_us, "kernel_fraction": kernels / wall_us}


def main() -> int:
    args = parse_args(__doc__.split("\n")[0])
    from accelstudy.device import resolve

    kind = resolve("auto").kind
    if kind not in SHAPES:
        raise SystemExit(f"no batch sweep for device kind '{kind}'")
    with tempfile.TemporaryDirectory(prefix="bench-gpu-steps-") as scratch:
        work = Path(scratch)
        found = batch_sweep(kind, work, args.tiny, args.threads)
        seq_len = TINY["max_seq_length"] if args.tiny or kind == "cpu" else 512
        profiled = profiled_step(work / "model", kind, found[0]["dtype"], 1, seq_len)
    print(f"profile: batch 1, {seq_len} tokens: kernels {profiled['kernel_us'] / 1e3:.1f} ms of a "
          f"{profiled['step_us'] / 1e3:.1f} ms step")  # fmt: skip
    speeds = [f["tokens_per_s"] for f in found]
    mfus = [f["mfu"] if f["mfu"] is not None else float("nan") for f in found]
    drops = [b / a for a, b in itertools.pairwise(speeds)]
    figures = {
        "mfu_min": min(mfus),
        "mfu_max": max(mfus),
        "tokens_per_s_drop_min": min(drops, default=1.0),
    }
    figures["kernel_fraction"] = profiled["kernel_fraction"]
    print(f"ratio: tokens/s batch {found[-1]['batch']} / batch 1 {speeds[-1] / speeds[0]:.2f}x; "
          f"kernel time / step time {profiled['kernel_fraction']:.2f}x")  # fmt: skip
    print("result: " + json.dumps({"device": kind, "sweep": found, "profile": profiled}))
    return judge(figures, BOUNDS, args.bound)


if __name__ == "__main__":
    sys.exit(main())
