"""This machine's limit and how close the default study came to it.

Prints the GEMM probe's rates per dtype (1 thread and every core, measured now: run it with
nothing else running), bfloat16 against float32 as a ratio (under 1: this CPU emulates
bfloat16, and `dtype: auto` trains in float32), then, from a finished default study's records
(`make study` first), the fraction of peak (MFU) per stage: achieved model FLOP/s over the
measured window against the probe's rate, the ratio this benchmark is about.

Bounds (common.judge; --tiny the same): bfloat16/float32 above 0 (each rate measured); the
FP32 rate per thread at most 320 GFLOP/s, what one core can issue at best (two 512-bit FMA
units: 2 x 16 lanes x 2 FLOPs per cycle at 5 GHz), so a faster one is a mis-timed probe; each
stage's MFU within (0, 1]: achieved FLOP/s above the measured peak means the peak is wrong.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.peak import cpu_model_and_flags, probe_key
from accelstudy.report import collect, utilization
from common import gemm_rates, judge, parse_args

CORE_FP32_MAX = 320e9  # FLOP/s one core can issue: 2 FMA units x 16 FP32 lanes x 2 x 5 GHz


def main() -> int:
    args = parse_args((__doc__ or "").splitlines()[0], results=Path("results/default"))
    figures, bounds = {}, {}
    model, flags = cpu_model_and_flags()
    shown = sorted({"avx2", "avx512f", "avx512_bf16", "amx_bf16"} & set(flags))
    print(f"CPU: {model} ({', '.join(shown) or 'no AVX2'}); torch kernels: {probe_key(1)}")
    for threads in sorted({1, os.cpu_count() or 1}):
        rates = gemm_rates(threads, args.tiny)
        ratio = rates["bfloat16"] / rates["float32"]
        print(
            f"ratio: {threads} thread(s): float32 {rates['float32'] / 1e9:7.1f} GFLOP/s, bfloat16 "
            f"{rates['bfloat16'] / 1e9:7.1f} GFLOP/s: bfloat16/float32 {ratio:.2f}x"
        )
        figures[f"bf16_over_fp32_{threads}t"] = ratio
        figures[f"fp32_per_thread_{threads}t"] = rates["float32"] / threads
        bounds[f"bf16_over_fp32_{threads}t"] = (1e-9, None)
        bounds[f"fp32_per_thread_{threads}t"] = (1e-9, CORE_FP32_MAX)
    records = sorted(map(str, args.results.glob("**/*.json")))
    records = [r for r in records if "/tables/" not in r and "/report/" not in r]
    frame = collect.collect_records(r for r in records if _is_record(r))
    if frame.empty:
        print(f"no records under {args.results}: run `make study` for the MFU per stage")
        return judge(figures, bounds, args.bound)
    stages = utilization.per_stage(frame)
    print(f"MFU per stage, {args.results} ({len(frame)} records):")
    print(stages.drop(columns="source").to_string(index=False, float_format="%.3f"))
    for source in stages["source"].unique():
        print(f"  peak: {source}")
    for row in stages.itertuples():
        name = f"mfu_{row.stage}_{row.system}_{row.compute_dtype}"
        figures |= {f"{name}_min": row.mfu_min, f"{name}_max": row.mfu_max}
        bounds |= {f"{name}_min": (1e-9, 1.0), f"{name}_max": (1e-9, 1.0)}
    return judge(figures, bounds, args.bound)


def _is_record(path: str) -> bool:
    import json

    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "schema_version" in record


if __name__ == "__main__":
    sys.exit(main())
