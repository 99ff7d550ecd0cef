"""A job's start-up by phase against bare baselines, measured in the same run on this machine.

Each bound of issue #38, our side from the record's `provenance.timeline.phases` (what every
measuring job records), the baseline run alongside, alternating, `--runs` times each:
- imports: an `accelstudy baseline` job (process start to its stage's code loaded, the model's
  class included) against a bare `python -c` importing the same libraries and model module
  (bound: at most 1.5x);
- device and process group: a DDP fine-tuning point's rank 0 under torchrun (device, energy
  counters, accelerate's state and its gloo group) against a bare `init_process_group` under
  the same torchrun (bound: at most 1.5x);
- model: the baseline job's model bytes (weights, config, tokenizer) over its model phase
  (tokenizer and weights loaded) against a plain read of the same files into memory (bound: at
  least 0.5x the rate).
The embedded SmolLM2-135M (FP32 safetensors, 0.5 GB), or --tiny: a tiny random Llama (a smoke
run: its files are too small for a rate to mean much); the process-group runs use the tiny one
(its few milliseconds vary with when the peer rank arrives: 7 runs each, the medians compared).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.models import model_files
from accelstudy.points import FinetunePoint, Lora
from accelstudy.tasks import relevant_settings
from common import launch_point, parse_args

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
MODELS = {False: {"source": "gguf", "gguf_file": "embedded"}, True: {"source": "tiny-random"}}
# what a bare process runs after its imports: its own start-up, as a job's record reckons it
SINCE_START = "from accelstudy.timeline import process_start; print(time.time() - process_start())"
BARE_GROUP = """import time, torch.distributed as dist
start = time.perf_counter()
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 0:
    print(time.perf_counter() - start)
dist.destroy_process_group()
"""


def run(command: list[str], threads: int) -> str:
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stderr[-2000:]}")
    return done.stdout


def prepare(work: Path, tiny: bool) -> Path:
    """A prepared model, as the study makes it."""
    model = work / ("tiny-model" if tiny else "model")
    spec = json.dumps(MODELS[tiny])
    run([str(BIN / "accelstudy"), "prepare-model", "--spec", spec, "--out", str(model)], 2)
    return model


def prepare_data(work: Path) -> Path:
    """WikiText's prepared test split, as the study makes it."""
    data, spec = work / "wikitext.jsonl", json.dumps({"source": "standin"})
    command = [str(BIN / "accelstudy"), "prepare-data", "--task", "wikitext", "--spec", spec]
    run([*command, "--split", "test", "--out", str(data)], 2)
    return data


def baseline_job(work: Path, model: Path, data: Path, threads: int) -> dict:
    """An evaluation job as the baseline rule runs it: its record's start-up phases."""
    out = work / "baseline.json"
    evaluation = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["evaluation"]
    settings = relevant_settings("wikitext", "paper", evaluation)
    command = [str(BIN / "accelstudy"), "baseline", "--study", "bench", "--system", "cpu"]
    command += ["--model-name", "m", "--model-dir", str(model), "--task", "wikitext"]
    command += ["--protocol", "paper", "--data", str(data), "--data-source", "standin"]
    command += ["--settings", json.dumps(settings), "--limit", "1", "--out", str(out)]
    run([*command, "--items", str(work / "items.parquet")], threads)
    return json.loads(out.read_text())["provenance"]["timeline"]["phases"]


def libraries(model: Path) -> list[str]:
    """The libraries a baseline job imports (top-level, not the standard library's), and its
    model's module: what a bare process imports to be compared."""
    probe = (
        "import sys, pkgutil; from pathlib import Path\n"
        "pkgutil.resolve_name('accelstudy.evaluate.baseline:baseline')\n"
        "from accelstudy.models import causal_lm_class\n"
        f"module = causal_lm_class(Path({str(model)!r})).__module__\n"
        "names = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)\n"
        "print(' '.join(sorted(n for n in names if n.isidentifier() and n[0] != '_'"
        " and n != 'accelstudy') + [module]))"
    )
    return run([sys.executable, "-c", probe], 1).split()


def bare_imports(names: list[str], threads: int) -> float:
    importing = "".join(f"import {name}\n" for name in ["time", *names])
    return float(run([sys.executable, "-c", importing + SINCE_START], threads))


def point(tiny: bool) -> FinetunePoint:
    lora = Lora(rank=8, alpha=16, dropout=0.05, targets=("q_proj", "v_proj"))
    shape = dict(per_device_batch=1, grad_accum=1, max_seq_length=32 if tiny else 128)
    recipe = dict(dtype="float32", learning_rate=3e-4, max_grad_norm=0.3, lora=lora)
    steps = dict(max_steps=2, throughput_warmup_steps=1, data={"source": "standin"})
    fixed = dict(strategy="ddp", attention="eager", cards=2, method="lora")
    return FinetunePoint(**fixed, **shape, **recipe, **steps)


def ranks_device(work: Path, model: Path, tiny: bool, threads: int) -> float:
    """A DDP point's rank 0 under the pipeline's torchrun: its device and process-group phase."""
    result = launch_point(point(tiny), model, work / "ranks.json", "cpu", threads)
    return result["phases"]["device_s"]


def bare_group(work: Path, threads: int) -> float:
    script = work / "bare_group.py"
    script.write_text(BARE_GROUP)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    return float(run([*torchrun, "--standalone", str(script)], max(1, threads // 2)))


def plain_read(files: list[Path]) -> float:
    """Seconds to read the files into memory, each whole, as a load must hold its bytes (a read
    into one reused buffer skips the page faults of memory that any load fills)."""
    start = time.perf_counter()
    for file in files:
        assert len(file.read_bytes()) == file.stat().st_size
    return time.perf_counter() - start


def main() -> int:
    args = parse_args(__doc__.split("\n")[0])
    runs = 1 if args.tiny else 7
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        work = Path(scratch)
        model, data = prepare(work, args.tiny), prepare_data(work)
        small = (
            model if args.tiny else prepare(work, True)
        )  # the process group's runs: the model's size is not timed
        names, files = libraries(model), model_files(model)
        print(f"bare imports: {' '.join(names)}")
        samples: dict[str, list[float]] = {}
        for _ in range(runs):  # alternating, so that a change in load hits both sides alike
            phases = baseline_job(work, model, data, args.threads)
            samples.setdefault("imports", []).append(phases["imports_s"])
            samples.setdefault("bare imports", []).append(bare_imports(names, args.threads))
            samples.setdefault("rate", []).append(phases["model_bytes"] / phases["model_s"])
            samples.setdefault("plain rate", []).append(
                sum(f.stat().st_size for f in files) / plain_read(files)
            )
            samples.setdefault("device", []).append(ranks_device(work, small, True, 2))
            samples.setdefault("bare device", []).append(bare_group(work, 2))
    median = {name: statistics.median(values) for name, values in samples.items()}
    for name, values in samples.items():
        print(f"{name:13s} median {median[name]:.4g} (runs {min(values):.4g}-{max(values):.4g})")
    bounds = [
        ("imports ours / bare python -c", median["imports"] / median["bare imports"], "<= 1.5"),
        ("device + process group ours / bare", median["device"] / median["bare device"], "<= 1.5"),
        ("model bytes/s ours / plain read", median["rate"] / median["plain rate"], ">= 0.5"),
    ]
    for what, ratio, bound in bounds:
        print(f"ratio: {what} {ratio:.2f}x (bound {bound}; {runs} runs each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
