"""Our fine-tuning job against a plain `transformers.Trainer` script: the workload from the harness.

One DDP point of the default study (the embedded SmolLM2-135M, LoRA r64 on q_proj and v_proj,
the study's dtype, fused attention; --tiny: a tiny random Llama) is run two ways on this
machine, alternating, `--runs` times each, under the same launcher (torchrun, gloo, `--ranks`
processes of `--threads` // ranks OMP threads each):

1. ours: `accelstudy finetune ...` exactly as workflow/rules/finetune.smk calls it (its point
   JSON, `--threads` = one core per process as the rule's), which plans, launches torchrun,
   trains with our Meter callback (per-step model-state byte counts, timeline marks) and
   writes a record;
2. the reference: this file's `reference()` under torchrun, which imports no accelstudy code
   (checked) and re-creates the authors' recipe. They ran optimum-habana's run_lora_clm.py with
   GaudiTrainer, which needs Gaudi; off Gaudi that is `transformers.Trainer`: the same prepared
   model folder, dtype and attention implementation, `torch.manual_seed(seed)` then
   `peft.get_peft_model` with the same LoRA settings (adapters in the model's dtype), the same
   `TrainingArguments` (finetune/engines.py's: batch, accumulation, lr, constant scheduler,
   max_grad_norm, AdamW, bf16, gloo), the same instruction rows file, prepared as the script's
   `--dataset_concatenation` does (re-implemented here), and the same clock: from the end of
   the `throughput_warmup_steps`-th step to the end of training, tokens/s = timed samples x
   ranks x sequence length / seconds, as finetune/train.py's Meter.
   One departure: run_lora_clm.py casts the PEFT model with `.to(torch.bfloat16)`, which
   gives the same parameters as `autocast_adapter_dtype=False` but also casts RoPE's FP32
   `inv_freq` buffer (losses then differ by ~2e-4 on the tiny model); the reference keeps our
   FP32 buffer so that both sides compute the same thing.

It prints both sides' per-step losses, the median over runs of ours / Trainer steady-state
tokens/s with the runs' range, and the same for the whole command's wall time (ours adds
planning, its own process, the record). `--steps` sets max_steps (default 8: the study's 3
leave 2 timed steps, too few to time a ratio). Bounds (common.judge): the losses equal (every
step of every run within 1e-6 of ours' first: the same computation) and ours / Trainer at least
0.95 in steady-state tokens/s (the same steps: our callbacks may cost little). --tiny (one run
of a tiny model's few millisecond steps on a busy machine): the speed only above 0.

FSDP is not compared. The project runs FSDP2 (`fully_shard`, strategies.FSDP2) while the authors'
stack (optimum-habana on accelerate) wrapped with FSDP1; a Trainer FSDP1 reference on a CPU
would need our own StrategyTrainer (accelerate enables FSDP on accelerators only) and FSDP1
falls back to NO_SHARD on tied embeddings (SmolLM2), so it would measure neither the authors'
FSDP nor ours: no `--strategy fsdp`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-6  # per-step losses: the same computation, so equal up to float noise at most
# --tiny: a tiny random Llama, short blocks, few steps (a smoke run of seconds)
TINY = {"max_seq_length": 64, "throughput_warmup_steps": 1}
STEPS = {False: 8, True: 4}  # max_steps unless --steps: the study's 3 leave 2 timed steps


# --- the reference: transformers.Trainer, as the authors' script on a CPU; no accelstudy ---


def reference_blocks(rows: list[dict], tokenizer, length: int, count: int) -> dict[str, list]:
    """run_lora_clm.py's prompts (PROMPT_DICT) with `--dataset_concatenation`: each example's
    prompt plus output tokenised (truncated to the block length, EOS appended where it fits),
    end to end, cut into full blocks; the first `count` (`--max_train_samples`)."""
    with_input = (
        "Below is an instruction that describes a task, paired with an input that provides "
        "further context. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
    )
    without_input = (
        "Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Response:"
    )
    texts = [
        (with_input if row.get("input") else without_input).format_map(row) + row["output"]
        for row in rows
    ]
    eos, stream = tokenizer.eos_token_id, []
    for ids in tokenizer(texts, truncation=True, max_length=length)["input_ids"]:
        if eos is not None and (not ids or ids[-1] != eos) and len(ids) < length:
            ids = [*ids, eos]
        stream.extend(ids)
    blocks = [stream[i : i + length] for i in range(0, len(stream) - length + 1, length)][:count]
    return {"input_ids": blocks, "attention_mask": [[1] * length for _ in blocks],
            "labels": [list(b) for b in blocks]}  # fmt: skip


def reference(argv: list[str]) -> int:
    """One rank of the reference run (under torchrun); rank 0 writes its clock and losses."""
    parser = argparse.ArgumentParser()
    for name in ("--point", "--dtype", "--model-dir", "--data", "--out"):
        parser.add_argument(name, required=True)
    parser.add_argument("--device", default="cpu", help="the system's device kind (ours runs it)")
    args = parser.parse_args(argv)
    on_cpu = args.device == "cpu"
    import torch
    from datasets import Dataset
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        default_data_collator,
    )

    point, bf16 = json.loads(args.point), args.dtype == "bfloat16"
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    training = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="trainer-reference-"), seed=point["seed"],
        save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True,
        logging_steps=1, max_steps=point["max_steps"],
        per_device_train_batch_size=point["per_device_batch"],
        gradient_accumulation_steps=point["grad_accum"], bf16=bf16,
        learning_rate=point["learning_rate"], max_grad_norm=point["max_grad_norm"],
        lr_scheduler_type="constant", optim="adamw_torch", use_cpu=on_cpu,
        ddp_backend="gloo" if on_cpu else "nccl",
        ddp_find_unused_parameters=False,
    )  # fmt: skip
    # a prepared Hub or local model names its folder in the manifest; a converted one is here
    manifest = Path(args.model_dir) / "manifest.json"
    weights = json.loads(manifest.read_text()).get("path") if manifest.is_file() else None
    weights = weights or args.model_dir
    tokenizer = AutoTokenizer.from_pretrained(weights)
    attention = {"fused": "sdpa", "eager": "eager"}[point["attention"]]
    model = AutoModelForCausalLM.from_pretrained(
        weights,
        use_safetensors=True,
        dtype=getattr(torch, args.dtype),
        attn_implementation=attention,
    )
    model.config.use_cache = False
    lora = point["lora"]
    adapters = LoraConfig(
        r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
        target_modules=list(lora["targets"]), bias="none", task_type=TaskType.CAUSAL_LM,
    )  # fmt: skip
    torch.manual_seed(point["seed"])
    model = get_peft_model(model, adapters, autocast_adapter_dtype=False)

    lines = Path(args.data).read_text().splitlines()  # the rows file the point names
    rows = [json.loads(line) for line in lines if line.strip()]
    rows = [{k: str(row.get(k) or "") for k in ("instruction", "input", "output")} for row in rows]
    world = training.world_size
    needed = point["max_steps"] * point["per_device_batch"] * point["grad_accum"] * world
    blocks = reference_blocks(rows, tokenizer, point["max_seq_length"], needed)

    class Clock(TrainerCallback):
        warmup, times = point["throughput_warmup_steps"], {}

        def on_train_begin(self, args, state, control, **kwargs):
            self.times["begin"] = time.perf_counter()
            if not self.warmup:
                self.times["warm"] = self.times["begin"]

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == self.warmup:
                self.times["warm"] = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            self.times["end"] = time.perf_counter()

    clock = Clock()
    trainer = Trainer(
        model=model, args=training, train_dataset=Dataset.from_dict(blocks),
        data_collator=default_data_collator, callbacks=[clock],
    )  # fmt: skip
    steps = trainer.train().global_step
    if training.process_index == 0:
        timed_s = clock.times["end"] - clock.times["warm"]
        samples = (steps - clock.warmup) * point["per_device_batch"] * point["grad_accum"] * world
        losses = [float(e["loss"]) for e in trainer.state.log_history if "loss" in e]
        ours = sorted({m.split(".")[0] for m in sys.modules} & {"accelstudy"})
        result = {"tokens_per_s": samples * point["max_seq_length"] / timed_s, "steps": steps}
        result |= {"losses": losses, "world_size": world, "accelstudy_imported": ours}
        Path(args.out).write_text(json.dumps(result))
    shutil.rmtree(training.output_dir, ignore_errors=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


# --- the comparison ---


def accelstudy_command() -> str:
    """The CLI the rules call: on PATH (as `make` sets it), else beside this interpreter."""
    return shutil.which("accelstudy") or str(Path(sys.executable).parent / "accelstudy")


def timed(command: list[str], log: Path, env: dict[str, str] | None = None) -> float:
    """Wall seconds of `command`, its output to `log` (as the rule's `> {log} 2>&1`)."""
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode:
        tail = log.read_text()[-4000:]
        raise SystemExit(f"{' '.join(command[:4])} ... exited {done.returncode}:\n{tail}")
    return time.perf_counter() - start


def prepare(scratch: Path, model_spec: dict, seed: int, data: dict) -> tuple[Path, Path]:
    """The prepared model and instruction rows, by the stages' own commands."""
    from common import prepare_stage

    model, rows = scratch / "model", scratch / "instructions.jsonl"
    prepare_stage("prepare-model", "--spec", json.dumps(model_spec), "--seed", str(seed),
                  "--out", str(model))  # fmt: skip
    prepare_stage("prepare-instructions", "--spec", json.dumps(data), "--out", str(rows))
    return model, rows


class Sides:
    """The two commands on one point, and what each run of either measured."""

    def __init__(self, args: argparse.Namespace, scratch: Path) -> None:
        from accelstudy.config import read_config
        from accelstudy.points import SweepCell, finetune_point
        from accelstudy.systems import load_system

        config = read_config(ROOT / "config" / "config.yaml")
        name = "tiny-random" if args.tiny else config["finetune"]["models"][0]
        spec = {"source": "tiny-random", "tiny": {}} if args.tiny else config["models"][name]
        data = config["finetune"]["data"]
        self.model, self.rows = prepare(scratch, spec, config["seed"], data)
        # the point as the rule passes it (targets.finetune_point_json), bar max_steps (--tiny:
        # short blocks too)
        cell = SweepCell(name, "ddp", config["finetune"]["attention"][0], args.ranks, 0)
        point = finetune_point(config, cell, data_file=str(self.rows))
        steps = args.steps or STEPS[args.tiny]
        self.point = point.replace(**(TINY if args.tiny else {}), max_steps=steps)
        self.threads, self.ranks, self.scratch = args.threads or args.ranks, args.ranks, scratch
        self.device = load_system(args.system).device
        self.ours_command = [accelstudy_command(), "finetune", "--study", "bench",
            "--system", args.system, "--model-name", name, "--model-dir", str(self.model),
            "--point", self.point.to_json(), "--data-source", data["source"],
            "--threads", str(self.threads)]  # fmt: skip
        self.ours: list[dict] = []
        self.theirs: list[dict] = []

    @property
    def rank_threads(self) -> int:
        """OMP threads per rank, as launch.PointJob.rank_threads splits the job's cores."""
        return max(1, self.threads // self.ranks)

    def run_ours(self, run: int) -> None:
        out = self.scratch / f"ours-{run}.json"
        wall = timed([*self.ours_command, "--out", str(out)], out.with_suffix(".log"))
        record = json.loads(out.read_text())
        dtype = record["utilization"]["dtype"]  # `auto` as the job resolved it
        self.ours.append(record["metrics"] | {"wall_s": wall, "dtype": dtype})

    def run_reference(self, run: int) -> None:
        out = self.scratch / f"reference-{run}.json"
        torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={self.ranks}"]
        worker = [str(Path(__file__).resolve()), "--reference", "--point", self.point.to_json()]
        worker += ["--dtype", self.ours[0]["dtype"], "--model-dir", str(self.model)]
        worker += ["--data", str(self.rows), "--out", str(out), "--device", self.device]
        env = os.environ | {"OMP_NUM_THREADS": str(self.rank_threads)}  # as the launcher sets
        wall = timed([*torchrun, "--standalone", *worker], out.with_suffix(".log"), env)
        self.theirs.append(json.loads(out.read_text()) | {"wall_s": wall})


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def difference(losses: list[float], others: list[float]) -> float:
    """The largest |difference| step by step (infinite if the step counts differ)."""
    if len(others) != len(losses):
        return math.inf
    return max((abs(a - b) for a, b in zip(losses, others, strict=True)), default=0.0)


def report(sides: Sides) -> dict[str, float]:
    """Print both sides' losses and speeds, and the ratios; the figures held to bounds."""
    ours, theirs = sides.ours, sides.theirs
    if imported := {m for t in theirs for m in t["accelstudy_imported"]}:
        raise SystemExit(f"the reference imported {sorted(imported)}")
    first = ours[0]["losses"]
    diffs = [difference(first, side["losses"]) for side in ours + theirs]
    equal = len(first) == sides.point.max_steps and max(diffs) <= TOLERANCE
    print(f"point: {sides.point.to_json()}")
    print(f"{ours[0]['dtype']}, {sides.ranks} ranks x {sides.rank_threads} OMP threads")
    print(f"losses ours    (run 1): {first}")
    print(f"losses Trainer (run 1): {theirs[0]['losses']}")
    print(
        f"losses: largest |difference| of any run of either side from ours' first: {max(diffs):.3g}"
    )
    for label, side in (("ours", ours), ("Trainer", theirs)):
        speeds, walls = [s["tokens_per_s"] for s in side], [s["wall_s"] for s in side]
        print(f"{label:7s}: {statistics.median(speeds):8.1f} tokens/s (runs {min(speeds):.1f}-"
              f"{max(speeds):.1f}); wall {statistics.median(walls):.1f} s (runs "
              f"{min(walls):.1f}-{max(walls):.1f})")  # fmt: skip
    speed = [o["tokens_per_s"] / t["tokens_per_s"] for o, t in zip(ours, theirs, strict=True)]
    wall = [o["wall_s"] / t["wall_s"] for o, t in zip(ours, theirs, strict=True)]
    print(f"ratio: ours / Trainer {statistics.median(speed):.2f}x steady-state tokens/s (runs "
          f"{spread(speed)}, {len(ours)} each); losses equal: {equal}")  # fmt: skip
    print(f"ratio: ours / Trainer {statistics.median(wall):.2f}x whole-command wall time (runs "
          f"{spread(wall)}; ours also plans and writes its record)")  # fmt: skip
    figures = {"ours_over_trainer": statistics.median(speed), "losses_equal": float(equal)}
    return figures | {"loss_difference": max(diffs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke run)")
    parser.add_argument("--runs", type=int, help="runs of each side (default 5; --tiny: 1)")
    parser.add_argument("--ranks", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--threads", type=int, help="the job's cores (default: one per rank)")
    parser.add_argument("--steps", type=int, help="max_steps (default 8; --tiny: 4)")
    parser.add_argument("--system", default="cpu", help="config/systems/ file both sides run on")
    sys.path.insert(0, str(ROOT / "bench"))
    from common import judge, parse_bound

    parser.add_argument("--bound", action="append", type=parse_bound, default=[],
                        metavar="NAME=LOW:HIGH", help="replace a figure's bound")  # fmt: skip
    args = parser.parse_args()
    runs = args.runs or (1 if args.tiny else 5)
    with tempfile.TemporaryDirectory(prefix="bench-vs-trainer-") as scratch:
        sides = Sides(args, Path(scratch))
        for run in range(runs):  # alternating, and which goes first too: ours first in run 1
            order = (sides.run_ours, sides.run_reference)
            for side in order if run % 2 == 0 else order[::-1]:
                side(run)
            print(f"run {run + 1}/{runs}: ours {sides.ours[-1]['tokens_per_s']:.1f} tokens/s, "
                  f"Trainer {sides.theirs[-1]['tokens_per_s']:.1f}", flush=True)  # fmt: skip
    figures = report(sides)
    bounds = {"ours_over_trainer": (1e-9 if args.tiny else 0.95, None)}
    bounds |= {"losses_equal": (1.0, 1.0), "loss_difference": (None, TOLERANCE)}
    return judge(figures, bounds, args.bound)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reference"]:
        sys.exit(reference(sys.argv[2:]))
    sys.exit(main())
