"""This machine's limit and how close the default study came to it.

Prints the GEMM probe's rates per dtype (1 thread and every core, measured now: run it with
nothing else running), bfloat16 against float32 as a ratio (under 1: this CPU emulates
bfloat16, and `dtype: auto` trains in float32), then, from a finished default study's records
(`make study` first), the fraction of peak (MFU) per stage: achieved model FLOP/s over the
measured window against the probe's rate, the ratio this benchmark is about.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.peak import cpu_model_and_flags, probe_key
from accelstudy.report import collect, utilization
from common import gemm_rates


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results/default"))
    parser.add_argument("--tiny", action="store_true", help="a quick probe, not cached")
    args = parser.parse_args()
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
    records = sorted(map(str, args.results.glob("**/*.json")))
    records = [r for r in records if "/tables/" not in r and "/report/" not in r]
    frame = collect.collect_records(r for r in records if _is_record(r))
    if frame.empty:
        print(f"no records under {args.results}: run `make study` for the MFU per stage")
        return
    stages = utilization.per_stage(frame)
    print(f"MFU per stage, {args.results} ({len(frame)} records):")
    print(stages.drop(columns="source").to_string(index=False, float_format="%.3f"))
    for source in stages["source"].unique():
        print(f"  peak: {source}")


def _is_record(path: str) -> bool:
    import json

    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "schema_version" in record


if __name__ == "__main__":
    main()
