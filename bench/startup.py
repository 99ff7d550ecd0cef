"""A job's start-up by phase against bare baselines, measured in the same run on this machine.

Each bound of issue #38, our side from what every measuring job records (`provenance.timeline.
phases`), the baseline run alongside, alternating, `--runs` times each; like for like (#46):
- imports: an `accelstudy baseline` job (process start to its stage's code loaded, the model's
  class included) against a bare `python -c` importing the same libraries and model module, the
  collector off during the imports as our programs do (timeline.starting) (bound: at most 1.5x);
- device and process group: a DDP fine-tuning point's rank 0 under torchrun (device, energy
  counters, accelerate's state and its gloo group: the record's device phase) against a bare
  `init_process_group` + barrier under the same torchrun. Neither counts waiting for the peer
  rank to arrive: each rank stamps when it begins setting up its group, and the time before the
  last of them began is taken off rank 0's (bound: at most 1.5x);
- model, cold and warm: the baseline job's model bytes (weights, config, tokenizer) over its
  model phase (tokenizer and weights loaded) against a plain read of the same files into
  memory, once with the files' pages dropped from the page cache before each side
  (posix_fadvise DONTNEED; TMPDIR on a disk, not a tmpfs), once with them cached (bound: at
  least 0.5x the rate, both).
The embedded SmolLM2-135M (FP32 safetensors, 0.5 GB); the process-group runs use the tiny
random Llama (the model's size is not timed there). `--tiny`: the tiny Llama throughout, one
run each and the model read cold only: a smoke run whose files are too small for a rate (its
model phase is the model's construction) and whose single runs on a busy machine cannot judge
1.5x, so its bounds only say each figure was measured (imports and device within 100x of their
baselines, the read rate above 0); tests/test_bench.py holds it to them.
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
from common import judge, launch_point, parse_args, prepare_stage

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
MODELS = {False: {"source": "gguf", "gguf_file": "embedded"}, True: {"source": "tiny-random"}}
# the collector as our programs start (accelstudy.timeline.starting), then what a bare process
# runs after its imports: its own start-up, as a job's record reckons it
NO_COLLECTOR = "import gc\ngc.disable()\n"
SINCE_START = "from accelstudy.timeline import process_start; print(time.time() - process_start())"
# a bare rank: stamps (epoch) just before its group and after a barrier all ranks reach
BARE_GROUP = """import gc
gc.disable()
import json, os, sys, time
import torch.distributed as dist
begun = time.time()
dist.init_process_group("gloo")
dist.barrier()
ended = time.time()
dist.destroy_process_group()
stamps = {"device_s": ended - begun, "group_begun": begun}
open(f"{sys.argv[1]}-{os.environ['RANK']}.json", "w").write(json.dumps(stamps))
"""
# our rank: the fine-tuning worker as the launcher runs it, each of its device phases stamped
# (epoch) and the one that makes the process group marked, every rank's written at exit
OUR_RANK = """import gc
gc.disable()
import json, os, runpy, sys, time
from contextlib import contextmanager
from accelstudy import timeline

spans, phase = [], timeline.phase
out = os.environ["BENCH_STAMPS"] + f"-{os.environ['RANK']}.json"

def grouped():
    return "torch.distributed" in sys.modules and sys.modules["torch.distributed"].is_initialized()

@contextmanager
def stamped(name):
    begun, before = time.time(), grouped()
    with phase(name):
        yield
    if name == "device":  # written now: a rank leaves by os._exit (ranks.exit_now)
        spans.append({"begun": begun, "s": time.time() - begun, "group": grouped() > before})
        open(out, "w").write(json.dumps(spans))

timeline.phase = stamped
runpy.run_module("accelstudy.finetune.train", run_name="__main__", alter_sys=True)
"""
# the bounds: ours against the baseline's figure; --tiny's only that each was measured
BOUNDS = {
    "imports": (None, 1.5),  # issue #38: the job's imports at most 1.5x a bare process's
    "device": (None, 1.5),  # and its device and group set-up at most 1.5x a bare group's
    "model_read_cold": (0.5, None),  # its model phase at least half a plain read's rate
    "model_read_warm": (0.5, None),
}
# --tiny: within 100x (imports, device); a tiny model's files are a few kB, so its model phase
# is the model's construction and tokenizer, not bytes: the rate only above 0 (and not warm)
TINY_BOUNDS = {"imports": (0.01, 100.0), "device": (0.01, 100.0), "model_read_cold": (1e-9, None)}


def run(command: list[str], threads: int, env: dict[str, str] | None = None) -> str:
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"} | (env or {})
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stderr[-2000:]}")
    return done.stdout


def prepare(work: Path, tiny: bool) -> Path:
    """A prepared model, as the study makes it."""
    model = work / ("tiny-model" if tiny else "model")
    spec = json.dumps(MODELS[tiny])
    prepare_stage("prepare-model", "--spec", spec, "--out", str(model))
    return model


def prepare_data(work: Path) -> Path:
    """WikiText's prepared test split, as the study makes it."""
    data, spec = work / "wikitext.jsonl", json.dumps({"source": "standin"})
    prepare_stage("prepare-data", "--task", "wikitext", "--spec", spec, "--split", "test",
                  "--out", str(data))  # fmt: skip
    return data


def baseline_job(work: Path, model: Path, data: Path, threads: int) -> dict:
    """An evaluation job as the baseline rule runs it: its record's start-up phases."""
    out = work / "baseline.json"
    evaluation = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["evaluation"]
    settings = relevant_settings("wikitext", "paper", evaluation)
    evaluation = {"task": "wikitext", "protocol": "paper", "data": str(data), "limit": 1}
    evaluation |= {"data_source": "standin", "settings": settings, "out": str(out)}
    evaluation["items"] = str(work / "items.parquet")
    command = [str(BIN / "accelstudy"), "baseline", "--study", "bench", "--system", "cpu"]
    command += ["--model-name", "m", "--model-dir", str(model)]
    run([*command, "--runs", json.dumps([evaluation])], threads)
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
    importing = NO_COLLECTOR + "".join(f"import {name}\n" for name in ["time", *names])
    return float(run([sys.executable, "-c", importing + SINCE_START], threads))


def point(tiny: bool) -> FinetunePoint:
    """One float32 step of one block (32 or 128 tokens) on 2 processes, LoRA r8: its start-up,
    not its step; the schema's defaults otherwise."""
    shape = dict(per_device_batch=1, grad_accum=1, max_seq_length=32 if tiny else 128)
    steps = dict(max_steps=1, throughput_warmup_steps=0, lora=Lora(rank=8, alpha=16))
    return FinetunePoint(attention="eager", cards=2, dtype="float32", **shape, **steps)


def unwaited(rank0_s: float, begun: list[float]) -> float:
    """Rank 0's seconds less its wait for the last rank to begin its group (`begun`: each
    rank's epoch stamp then, rank 0's first): from there the group forms together."""
    return rank0_s - max(0.0, max(begun) - begun[0])


def ranks_device(work: Path, model: Path, threads: int) -> float:
    """A DDP point's rank 0 under the pipeline's torchrun: its device and process-group phase
    (the record's), less its wait for the peer (its spans stamped by OUR_RANK)."""
    (work / "bench_rank.py").write_text(OUR_RANK)
    stamps = work / "ours"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")]))}
    result = launch_point(point(True), model, work / "ranks.json", "cpu", threads, "bench_rank",
                          env | {"BENCH_STAMPS": str(stamps)})  # fmt: skip
    spans = [json.loads(Path(f"{stamps}-{rank}.json").read_text()) for rank in (0, 1)]
    begun = [next(s["begun"] for s in ranked if s["group"]) for ranked in spans]
    recorded = result["phases"]["device_s"]  # what the record says: the spans' sum, rounded
    assert abs(recorded - sum(s["s"] for s in spans[0])) < 0.01, (recorded, spans[0])
    return unwaited(recorded, begun)


def bare_group(work: Path, threads: int) -> float:
    script, stamps = work / "bare_group.py", work / "bare"
    script.write_text(BARE_GROUP)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    run([*torchrun, "--standalone", str(script), str(stamps)], max(1, threads // 2))
    ranks = [json.loads(Path(f"{stamps}-{rank}.json").read_text()) for rank in (0, 1)]
    return unwaited(ranks[0]["device_s"], [r["group_begun"] for r in ranks])


def drop_cached(files: list[Path]) -> None:
    """Out of the page cache, so that the next read comes from the disk (written pages are
    flushed first: a dirty page is not dropped)."""
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def plain_read(files: list[Path]) -> float:
    """Bytes per second reading the files into memory, each whole, as a load must hold its bytes
    (a read into one reused buffer skips the page faults of memory that any load fills)."""
    start = time.perf_counter()
    for file in files:
        assert len(file.read_bytes()) == file.stat().st_size
    return sum(f.stat().st_size for f in files) / (time.perf_counter() - start)


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

        def sample(name: str, value: float) -> None:
            samples.setdefault(name, []).append(value)

        for _ in range(runs):  # alternating, so that a change in load hits both sides alike
            drop_cached(files)
            phases = baseline_job(work, model, data, args.threads)
            sample("rate cold", phases["model_bytes"] / phases["model_s"])
            sample("imports", phases["imports_s"])
            sample("bare imports", bare_imports(names, args.threads))
            drop_cached(files)
            sample("plain cold", plain_read(files))
            sample("plain warm", plain_read(files))
            if not args.tiny:  # --tiny: the cold one's code path is the warm one's, bar the drop
                phases = baseline_job(work, model, data, args.threads)
                sample("rate warm", phases["model_bytes"] / phases["model_s"])
                sample("imports", phases["imports_s"])
            sample("device", ranks_device(work, small, 2))
            sample("bare device", bare_group(work, 2))
    median = {name: statistics.median(values) for name, values in samples.items()}
    for name, values in samples.items():
        print(f"{name:13s} median {median[name]:.4g} (runs {min(values):.4g}-{max(values):.4g})")
    figures = {
        "imports": median["imports"] / median["bare imports"],
        "device": median["device"] / median["bare device"],
        "model_read_cold": median["rate cold"] / median["plain cold"],
    }
    if "rate warm" in median:
        figures["model_read_warm"] = median["rate warm"] / median["plain warm"]
    whats = {
        "imports": "imports ours / bare python -c (collector off in both)",
        "device": "device + process group ours / bare (peer's arrival not counted)",
        "model_read_cold": "model bytes/s ours / plain read, pages dropped first",
        "model_read_warm": "model bytes/s ours / plain read, pages cached",
    }
    for name, what in whats.items():
        if name in figures:
            print(f"ratio: {what} {figures[name]:.2f}x ({name}; {runs} runs each)")
    return judge(figures, TINY_BOUNDS if args.tiny else BOUNDS, args.bound)


if __name__ == "__main__":
    sys.exit(main())
