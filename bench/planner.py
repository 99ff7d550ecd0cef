"""The memory planner held to runs it was not fitted to: predicted beside measured, per point.

A few LoRA steps per point through the launcher the pipeline uses, on whatever device is
present. The card figure is what a device's allocator counts, on every kind: the largest
rank's peak bytes of live tensors (max_memory_allocated on a card; on the CPU the peak of torch's
live blocks, by address, from the profiler's memory events, the lesser of two runs of their
own, as the profiler's event buffers pin glibc's heap) against the planner's tensors
(plan_tensors: no fitted constant), the steps' or the load's, whichever is higher.
The host figure is each rank's peak RSS (VmHWM) in a plain run against the host plan
(plan_host); on the CPU it holds what a rank keeps beyond its tensors, the process and glibc's
heap, so every fitted CPU constant is judged there (resources/planner_constants.csv names the
runs each was fitted on: the tiny Llama and SmolLM2-135M at 128-512 tokens).
The held-out grid on the CPU: a scaled-down Qwen2 shape (random init: tied embeddings, GQA,
biases on q/k/v) at 64 tokens on 1 and 2 ranks, every strategy, and at 1024 tokens on 2 ranks,
every strategy and both attentions; the tiny Llama at 1024 tokens on 1 rank; a second family
no constant has seen, a Gemma shape (multi-query attention, head_dim apart from the width,
GeGLU, a 4k vocabulary) at 256 tokens on 1 and 2 ranks, every strategy, eager attention at 2
ranks, and at 2048 tokens; both families again at 6 layers of width 768 (160-230 MB of
weights, float32), where a rank's tensors outweigh its process. Measure with nothing else
running: a point's RSS repeats within 1-2 MB on a quiet machine and grew 15-20% beside a test
suite (docs/measurements.md).
On a GPU, TinyLlama-1.1B's and Llama-3.1-8B's shapes with random weights on the cards present
(at most 2). Bounds (issue #46): card within [0, +35%] of measured, host within [-10%, +50%],
every point and rank; one outside fails the bench.
--tiny: the held-out family at 64 tokens, 1 rank, DDP with fused attention, its traced run
alone (a smoke run), held
only to what one run of a 100 MB rank can judge beside the suite's other work: each error
within [-50%, +100%] (the planner is in the right range, and the figures are measured).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.device import resolve
from accelstudy.finetune.planner import plan_host, plan_tensors
from accelstudy.models import load_model_config, prepare_model, save_prepared, train_tiny_tokenizer
from accelstudy.points import FinetunePoint
from accelstudy.random_source import is_random
from accelstudy.strategies import STRATEGIES
from accelstudy.systems import load_system
from common import judge, launch_point, parse_args

# Qwen2-0.5B's make (tied embeddings, GQA, biases on q/k/v, rope_theta 1e6), scaled down to
# what a 2-core CPU without bfloat16 units trains in seconds: 2 layers of width 128, 2k tokens
QWEN2_SHAPED = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "vocab_size": 2048,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}
# Gemma's make (tied embeddings, multi-query attention, head_dim 64 apart from the width: the
# q projection 256 wide over a width of 128, GeGLU, a 4k vocabulary): the second held-out family
GEMMA_SHAPED = {
    "model_type": "gemma",
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "vocab_size": 4096,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": True,
    "hidden_activation": "gelu_pytorch_tanh",
}
# the same makes at sizes where a rank's tensors outweigh its process (160-230 MB of weights):
# 6 layers of width 768, an 8k vocabulary
LARGE = {"hidden_size": 768, "num_hidden_layers": 6, "vocab_size": 8192}
SHAPED = {
    "qwen2-shaped": ("Qwen2Config", QWEN2_SHAPED),
    "gemma-shaped": ("GemmaConfig", GEMMA_SHAPED),
    "qwen2-large": (
        "Qwen2Config",
        QWEN2_SHAPED
        | LARGE
        | dict(intermediate_size=2048, num_attention_heads=12, num_key_value_heads=2),
    ),
    "gemma-large": (
        "GemmaConfig",
        GEMMA_SHAPED | LARGE | dict(intermediate_size=3072, num_attention_heads=8, head_dim=128),
    ),
}
SPECS = {  # prepare-model specs; the "-shaped" ones are made in the scratch folder (prepared)
    "tiny-llama": {"source": "tiny-random", "tiny": {}},
    "smollm2-135m": {"source": "gguf", "gguf_file": "embedded"},
    "tinyllama-1.1b": {"source": "random", "config": "tinyllama-1.1b"},
    "llama-3.1-8b": {"source": "random", "config": "llama-3.1-8b-instruct"},
}
STRATEGY_NAMES, BOTH = tuple(STRATEGIES), ("fused", "eager")


class Grid(NamedTuple):
    model: str
    seq: tuple[int, ...]
    ranks: tuple[int, ...]
    strategies: tuple[str, ...] = STRATEGY_NAMES
    attentions: tuple[str, ...] = BOTH
    dtype: str = "bfloat16"  # float32 for the large shapes: bfloat16 is emulated on AVX2 alone


GRIDS = {  # per device kind: the held-out points, and on the CPU the first grid's (see below)
    "cpu": (
        # held out from every constant: a second family at two new lengths
        Grid("gemma-shaped", (256,), (1, 2), attentions=("fused",)),  # each strategy, 1 and 2 ranks
        Grid("gemma-shaped", (256,), (2,), ("ddp",), ("eager",)),
        Grid("gemma-shaped", (2048,), (1,), ("ddp",), ("fused",)),
        # the first held-out family
        Grid("qwen2-shaped", (64,), (1, 2), attentions=("fused",)),  # 1 and 2 ranks, each strategy
        Grid("qwen2-shaped", (64,), (1,), ("ddp",), ("eager",)),
        Grid("qwen2-shaped", (1024,), (2,)),  # long blocks: each strategy, both attentions
        Grid("tiny-llama", (1024,), (1,), ("ddp",)),  # a fitted family at a new length, 1 rank
        # both families at hundreds of MB a rank, float32
        Grid("qwen2-large", (64,), (1, 2), attentions=("fused",), dtype="float32"),
        Grid("qwen2-large", (1024,), (2,), ("ddp",), dtype="float32"),
        Grid("gemma-large", (256,), (1,), attentions=("fused",), dtype="float32"),
    ),
    "cuda": (Grid("tinyllama-1.1b", (512,), (2,)), Grid("llama-3.1-8b", (512,), (2,))),
}
TINY = Grid("qwen2-shaped", (64,), (1,), ("ddp",), ("fused",))
SYSTEM = {"cpu": "cpu", "cuda": "gpu-workstation"}
TINY_BOUNDS = {
    f"{side}_error_{end}": (-0.5, 1.0) for side in ("card", "host") for end in ("min", "max")
}
# a CPU rank as the launcher runs it, torch's allocations traced (the profiler's memory events)
# from where the record's peak starts to where it is read; each rank writes its peak bytes live
TRACED_RANK = """import os, runpy
import transformers
from torch._C._profiler import _ExtraFields_Allocation
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile
from accelstudy.device import Device

traced = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
reset, read = Device.reset_peak_memory, Device.peak_memory_bytes
step = transformers.Trainer.training_step

def start(self):
    reset(self)
    traced.start()

def stepped(self, *args, **kwargs):
    with record_function("bench::step"):
        return step(self, *args, **kwargs)

def stop(self):
    traced.stop()
    nodes, first, blocks = list(traced.profiler.kineto_results.experimental_event_tree()), [], []
    while nodes:
        node = nodes.pop()
        nodes.extend(node.children)
        first += [node.start_time_ns] if node.name == "bench::step" else []
        if isinstance(node.extra_fields, _ExtraFields_Allocation):
            blocks.append((node.start_time_ns, node.extra_fields.ptr, node.extra_fields.alloc_size))
    # live blocks by address: a free on a thread the profiler does not trace (gloo's, DeepSpeed's
    # all-gathers) goes unseen, and its block counts as freed when its address is handed out again
    live, held, peaks = {}, 0, [0, 0]  # over the run; from the first step
    for at, ptr, size in sorted(blocks):
        held -= live.pop(ptr, 0)
        if size > 0:
            live[ptr], held = size, held + size
        peaks = [max(peaks[0], held), max(peaks[1], held) if at >= min(first) else 0]
    with open(os.environ["BENCH_ALLOCATED"] + "-" + os.environ["RANK"], "w") as out:
        out.write(str(peaks))
    return read(self)

Device.reset_peak_memory, Device.peak_memory_bytes = start, stop
transformers.Trainer.training_step = stepped
runpy.run_module("accelstudy.finetune.train", run_name="__main__", alter_sys=True)
"""
# traced runs per CPU point: a free on a thread the profiler does not trace can leave one block
# counted live (a 64-token DDP point measured 6, 8 and 6 MB in three runs: the 2 MB block was in
# no stack); such a block only adds, so the least of two runs is the nearer count
TRACED_RUNS = 2
BOUNDS = {  # predicted / measured - 1 over every point (host: every rank)
    "card_error_min": (0.0, None),
    "card_error_max": (None, 0.35),
    "host_error_min": (-0.10, None),
    "host_error_max": (None, 0.50),
}


def point(strategy: str, attention: str, cards: int, seq: int, dtype: str) -> FinetunePoint:
    """The study's recipe (the schema's defaults: LoRA r64 on q and v, bf16), short: 4 steps, 2
    of warm-up; micro-batches of 2 blocks, 1 from 1024 tokens (a bfloat16 step without its units
    takes minutes)."""
    shape = dict(per_device_batch=1 if seq >= 1024 else 2, max_seq_length=seq)
    return FinetunePoint(strategy=strategy, attention=attention, cards=cards, max_steps=4,
                         throughput_warmup_steps=2, dtype=dtype, **shape)  # fmt: skip


def errors(spec: FinetunePoint, model_dir: Path, card_peak: int, steps_peak: int,
           host_peaks: list) -> dict:  # fmt: skip
    """predicted / measured - 1: the card (largest rank's allocator peak over the run) and the
    host (each rank's VmHWM); the allocator's peak from the first step shown beside (NaN: not
    measured apart, on a card)."""
    config, kind = load_model_config(model_dir), resolve("auto").kind
    card = plan_tensors(config, spec, kind).total
    per_node = load_system(SYSTEM[kind]).layout(spec.cards)[1]
    host = plan_host(config, spec, kind, per_node, random_weights=is_random(model_dir)).per_rank
    hosts = [p / m - 1 for p, m in zip(host, host_peaks, strict=False)]
    return {
        "card": card / card_peak - 1,
        "host_min": min(hosts),
        "host_max": max(hosts),
        "card_mb": (card / 1e6, card_peak / 1e6, steps_peak / 1e6),
        "host_mb": ([h / 1e6 for h in host], [m / 1e6 for m in host_peaks]),
    }


def measure(
    spec: FinetunePoint, model_dir: Path, threads: int, tiny: bool
) -> tuple[int, float, list]:
    """(the largest rank's allocator peak over the run and from its first step, each rank's
    VmHWM): on a card from one run; on the CPU the least of TRACED_RUNS traced runs
    (TRACED_RANK) and a plain one (--tiny: one traced run and its VmHWM, whose profiler buffers
    its wide bound takes in)."""
    out, kind = model_dir.parent / "point.json", resolve("auto").kind
    if kind != "cpu":
        plain = launch_point(spec, model_dir, out, SYSTEM[kind], threads)["metrics"]
        return plain["peak_memory_bytes"], math.nan, plain["host_peak_rss_per_rank"]
    (model_dir.parent / "traced_rank.py").write_text(TRACED_RANK)
    files = model_dir.parent / "allocated"
    path = os.pathsep.join(filter(None, [str(model_dir.parent), os.environ.get("PYTHONPATH")]))
    # transformers reads weights in a pool of threads, whose allocations the profiler (on the
    # main thread) does not see: the traced run reads them on the main thread
    env = {"PYTHONPATH": path, "BENCH_ALLOCATED": str(files), "HF_DEACTIVATE_ASYNC_LOAD": "1"}
    runs = []  # a block freed where the profiler does not look stays live: the least of two runs
    for _ in range(1 if tiny else TRACED_RUNS):
        traced = launch_point(spec, model_dir, out, "cpu", threads, "traced_rank", env)["metrics"]
        peaks = [json.loads(Path(f"{files}-{rank}").read_text()) for rank in range(spec.cards)]
        runs.append(tuple(max(peak[i] for peak in peaks) for i in (0, 1)))
    run, steps = min(runs)
    plain = traced if tiny else launch_point(spec, model_dir, out, "cpu", threads)["metrics"]
    return run, steps, plain["host_peak_rss_per_rank"]


def prepared(name: str, scratch: Path) -> Path:
    """The model's prepared folder in `scratch`. The held-out shape's weights are made here and
    saved: `source: random` fails under ZeRO-3's zero.Init on this transformers (RoPE's buffer
    left on the meta device), so its points would judge only DDP and FSDP."""
    model_dir = scratch / name / "model"
    if model_dir.is_dir():  # an earlier grid's
        return model_dir
    if name not in SHAPED:
        prepare_model(SPECS[name], model_dir)
        return model_dir
    import transformers
    from transformers import AutoModelForCausalLM

    class_name, made = SHAPED[name]
    tokenizer = train_tiny_tokenizer(made["vocab_size"])
    shape = {k: v for k, v in made.items() if k not in ("architectures", "model_type")}
    special = {f"{t}_token_id": getattr(tokenizer, f"{t}_token_id") for t in ("bos", "eos", "pad")}
    config = getattr(transformers, class_name)(**shape | {"vocab_size": len(tokenizer)} | special)
    torch.manual_seed(0)
    save_prepared(AutoModelForCausalLM.from_config(config), tokenizer, model_dir)
    return model_dir


def main() -> int:
    args = parse_args(__doc__.split("\n")[0])
    kind = resolve("auto").kind
    if kind not in GRIDS:
        raise SystemExit(f"no planner bench for device kind '{kind}'")
    grids = (TINY,) if args.tiny else GRIDS[kind]
    found: list[dict[str, Any]] = []
    head = f"{'model':14s} {'seq':>5s} {'ranks':>5s} {'strategy':8s} {'attention':9s}"
    print(f"{head} {'card':>7s} {'host':>15s}  card MB plan/run/steps; host MB plan / VmHWM")
    with tempfile.TemporaryDirectory(prefix="bench-planner-") as scratch:
        for grid in grids:
            model_dir = prepared(grid.model, Path(scratch))
            for ranks, seq, strategy, attention in itertools.product(
                grid.ranks, grid.seq, grid.strategies, grid.attentions
            ):
                if kind == "cuda":
                    ranks = min(ranks, torch.cuda.device_count())
                run = point(strategy, attention, ranks, seq, grid.dtype)
                measured = measure(run, model_dir, args.threads, args.tiny)
                found.append(errors(run, model_dir, *measured))
                e = found[-1]
                shown = f"{e['card']:+7.1%} {e['host_min']:+7.1%}/{e['host_max']:+7.1%}"
                (plan, peak, steps), (hosts, rss) = e["card_mb"], e["host_mb"]
                mb = f"{plan:.0f}/{peak:.0f}/{steps:.0f}; {'/'.join(f'{h:.0f}' for h in hosts)}"
                mb += f" / {'/'.join(f'{m:.0f}' for m in rss)}"
                print(f"{grid.model:14s} {seq:5d} {ranks:5d} {strategy:8s} {attention:9s} "
                      f"{shown}  {mb}", flush=True)  # fmt: skip
    figures = {
        "card_error_min": min(f["card"] for f in found),
        "card_error_max": max(f["card"] for f in found),
        "host_error_min": min(f["host_min"] for f in found),
        "host_error_max": max(f["host_max"] for f in found),
    }
    card = (1 + figures["card_error_min"], 1 + figures["card_error_max"])
    host = (1 + figures["host_error_min"], 1 + figures["host_error_max"])
    print(
        f"ratio: planner/measured card {card[0]:.2f}x-{card[1]:.2f}x (bound 1.00-1.35), "
        f"host {host[0]:.2f}x-{host[1]:.2f}x (bound 0.90-1.50) over {len(found)} points on {kind}"
    )
    return judge(figures, TINY_BOUNDS if args.tiny else BOUNDS, args.bound)


if __name__ == "__main__":
    sys.exit(main())
