"""SR3 training speed at 1 and 2 processes, measured in one run, and the achieved FLOP/s
against this machine's measured GEMM rate.

Both points train the default study's small SR3 (16 -> 64 on a stand-in dust sky) through
the launcher the pipeline uses. Ratios: images/s at 2 processes against 1 (strong-scaling
speed-up); achieved FLOP/s (FLOPs per image counted by torch x images/s) against the FP32
GEMM probe's rate (accelstudy.peak) on all of this run's threads, measured just before.
Bounds (common.judge): the speed-up within (0, 2.5] (2 processes on the same cores: at most 2x,
some slack for cache effects; at or below 0, nothing ran); each MFU within (0, 1] (above the
measured dense rate means a wrong FLOP count or peak). --tiny: the speed-up only above 0 (its
steps take milliseconds: one stall of a busy machine in the 1-process window gave 80x in the
test suite), the MFUs as the full run's.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.data.dust import prepare_dust
from accelstudy.diffusion.job import WORKER
from accelstudy.launch import PointJob
from accelstudy.paths import PROJECT_ROOT
from accelstudy.points import DiffusionPoint
from accelstudy.study import load_study
from common import gemm_rates, judge, parse_args


def point(sweep: dict, devices: int, iterations: int) -> DiffusionPoint:
    keys = ("warmup_iterations", "batch_per_device", "learning_rate", "dtype", "model", "schedule")
    quick = {"images": 1, "sampling_steps": 1}  # the quality check is not what is timed
    fixed = dict(devices=devices, repeat=0, seed=0, total_iterations=iterations, quality=quick)
    return DiffusionPoint(**{k: sweep[k] for k in keys}, **fixed)


def main() -> int:
    args = parse_args(__doc__)
    sweep = load_study(PROJECT_ROOT / "config" / "config.yaml")["diffusion"]
    iterations = 8 if args.tiny else 24
    if args.tiny:  # the tests' small SR3 on a small sky
        sweep["model"] |= {"inner_channels": 8, "channel_multipliers": [1, 2], "res_blocks": 1}
        sweep["data"] |= {"nside": 16, "hr_size": 16}
    peak = gemm_rates(args.threads, args.tiny)["float32"]  # the study's limit, measured now
    rates = {}
    with tempfile.TemporaryDirectory(prefix="bench-diffusion-") as scratch:
        folder = Path(scratch)
        data = {**sweep["data"], "patches": 16 if args.tiny else 64, "validation_patches": 1}
        prepare_dust(data, 0, folder / "pairs.npz", folder / "card.json")
        for devices in (1, 2):
            out = folder / f"devices-{devices}.json"
            cli = ["--point", point(sweep, devices, iterations).to_json()]
            cli += ["--data", str(folder / "pairs.npz"), "--samples", str(folder / "panel.npz")]
            job = PointJob.from_flags(study="bench", system="cpu", threads=args.threads, out=out)
            rates[devices] = job.launch(devices, WORKER, cli)
    print(f"FP32 GEMM probe ({args.threads} threads): {peak / 1e9:.1f} GFLOP/s")
    for devices, m in rates.items():
        flops = m["achieved_flops_per_s"]
        print(
            f"{devices} process(es): {m['images_per_s']:.2f} images/s, "
            f"{flops / 1e9:.1f} GFLOP/s = MFU {flops / peak:.2f}"
        )
    speedup = rates[2]["images_per_s"] / rates[1]["images_per_s"]
    print(f"ratio: speed-up 2 vs 1 process {speedup:.2f}x")
    figures = {f"mfu_{d}": m["achieved_flops_per_s"] / peak for d, m in rates.items()}
    bounds = {name: (1e-9, 1.0) for name in figures} | {
        "speedup": (1e-9, None if args.tiny else 2.5)
    }
    return judge(figures | {"speedup": speedup}, bounds, args.bound)


if __name__ == "__main__":
    sys.exit(main())
