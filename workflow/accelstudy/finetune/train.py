"""One fine-tuning point on this rank: `python -m accelstudy.finetune.train --point JSON
--model-dir DIR --out RESULT.json`, under torchrun or alone; results and failures as
accelstudy.ranks. A retry resumes from the newest checkpoint where the point keeps them
(`checkpoint_steps`), and its result says its speed is not a clean measurement."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import torch
from transformers import TrainerCallback, default_data_collator

from accelstudy import ranks
from accelstudy.finetune import strategies
from accelstudy.records import package_versions

OOM_HOOK = "ACCELSTUDY_TEST_RAISE_OOM"  # "1": every rank raises OutOfMemoryError in step 1
CPU_PEAK = "RSS growth: getrusage ru_maxrss at the end minus the RSS before the model loads"
WARMUP_NOTE = "lr_scheduler constant ignores warm-up: the authors' warmup_ratio 0.03 had no effect"


class Meter(TrainerCallback):
    """Runtime, the clock after this run's warm-up steps (as `--throughput_warmup_steps`), the
    losses, and the model-state bytes this rank holds right after each optimizer step."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.start = 0
        self.times: dict[str, float] = {}
        self.losses: list[float] = []
        self.held: dict[str, int] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = state.global_step
        self.times["begin"] = time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        if os.environ.get(OOM_HOOK) == "1":
            raise torch.OutOfMemoryError(f"out of memory (test hook {OOM_HOOK})")

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        counts = strategies.held_bytes(model, getattr(optimizer, "optimizer", optimizer))
        self.held = {key: max(value, self.held.get(key, 0)) for key, value in counts.items()}

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step - self.start == self.warmup_steps:
            self.times["warm"] = time.perf_counter()

    def on_save(self, args, state, control, **kwargs):
        ranks.killed_at(state.global_step)  # the test hook: dies after this checkpoint

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))

    def on_train_end(self, args, state, control, **kwargs):
        self.times["end"] = time.perf_counter()


def decoder_layer_classes(model_dir: Path) -> list[str]:
    """What FSDP wraps: the model's no-split modules (its decoder layer), named as the built
    model's classes are, which on Gaudi are optimum-habana's subclasses of them."""
    from accelstudy.finetune.planner import load_config, meta_model

    model = meta_model(load_config(model_dir))
    wanted = set(model._no_split_modules)
    return sorted(
        {type(m).__name__ for m in model.modules() if wanted & {c.__name__ for c in type(m).mro()}}
    )


def load_model(model_dir: Path, point: dict[str, Any], device_kind: str = "cpu"):
    """The prepared model in the point's dtype and attention (on Gaudi: gaudi_model_flags), with
    LoRA adapters in the model's dtype, as the authors' `lora_model.to(bfloat16)`."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from accelstudy.device import DTYPES
    from accelstudy.models import DTYPE_KWARG

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    kwargs: dict[str, Any] = {DTYPE_KWARG: DTYPES[point["dtype"]]}
    if device_kind != "hpu":
        kwargs["attn_implementation"] = strategies.ATTENTION[point["attention"]]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), use_safetensors=True, **kwargs)
    model.config.use_cache = False
    if point["method"] == "lora":
        lora = point["lora"]
        config = LoraConfig(
            r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
            target_modules=list(lora["targets"]), bias="none", task_type=TaskType.CAUSAL_LM,
        )  # fmt: skip
        model = get_peft_model(model, config, autocast_adapter_dtype=False)
    return model, tokenizer


def train_dataset(point: dict[str, Any], tokenizer, world_size: int):
    """Exactly the blocks the steps consume: steps x batch x accumulation x ranks."""
    from datasets import Dataset

    from accelstudy.data.instructions import concatenated_blocks, load_examples

    needed = point["max_steps"] * point["per_device_batch"] * point["grad_accum"] * world_size
    examples = load_examples(point.get("data") or {"source": "standin"})
    return Dataset.from_dict(
        concatenated_blocks(examples, tokenizer, point["max_seq_length"], limit=needed)
    )


def checkpoint_dir(out: Path) -> Path:
    """Beside the result, not in the scratch directory, so that a restarted job finds it."""
    return out.with_name(out.name + ".checkpoints")


def last_checkpoint(directory: Path) -> Path | None:
    """The newest complete checkpoint (the Trainer writes trainer_state.json last)."""
    done = [state.parent for state in directory.glob("checkpoint-*/trainer_state.json")]
    return max(done, key=lambda path: int(path.name.rpartition("-")[2]), default=None)


def run_point(point: dict[str, Any], model_dir: Path, out: Path) -> dict[str, Any]:
    """Train one point on this rank; return this rank's measurements."""
    from accelstudy.device import resolve

    device = resolve(point.get("device", "auto"))
    # the launcher's OMP_NUM_THREADS wins (torchrun sets 1 where none is given)
    for key, value in strategies.process_env(ranks.local_processes()).items():
        os.environ.setdefault(key, value)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    strategies.prepare_state(point["strategy"], device.kind)
    baseline = psutil.Process().memory_info().rss
    device.reset_peak_memory()
    kept = checkpoint_dir(out) if point.get("checkpoint_steps") else None
    with tempfile.TemporaryDirectory(prefix="accelstudy-ft-") as scratch:
        layers = decoder_layer_classes(model_dir)
        if device.kind == "hpu":
            args = strategies.gaudi_training_arguments(point, kept or Path(scratch), layers)
        else:
            args = strategies.training_arguments(point, kept or Path(scratch), device.kind, layers)
        model, tokenizer = load_model(model_dir, point, device.kind)  # after the args: zero.Init
        meter = Meter(point.get("throughput_warmup_steps", 3))
        trainer_kwargs = dict(
            args=args, data_collator=default_data_collator, callbacks=[meter],
            train_dataset=train_dataset(point, tokenizer, args.world_size),
        )  # fmt: skip
        if device.kind == "hpu":
            trainer = strategies.gaudi_trainer(point, model, **trainer_kwargs)
        else:
            trainer = strategies.StrategyTrainer(model=model, **trainer_kwargs)
        resume = last_checkpoint(kept) if kept else None
        steps = trainer.train(resume_from_checkpoint=str(resume) if resume else None).global_step
    peak = device.peak_memory_bytes()
    warmed = "warm" in meter.times and steps - meter.start > meter.warmup_steps
    return {
        "device": device.kind, "world_size": args.world_size, "steps": steps,
        "resumed_from_step": meter.start, "runtime_s": meter.times["end"] - meter.times["begin"],
        "timed_s": meter.times["end"] - meter.times["warm" if warmed else "begin"],
        "warmup_steps": meter.warmup_steps if warmed else 0, "losses": meter.losses,
        "peak_memory_bytes": peak - baseline if device.kind == "cpu" else peak,
        "model_state_bytes": meter.held,
    }  # fmt: skip


def summarise(point: dict[str, Any], ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The point's result: rank 0's clock and losses, every rank's memory and bytes."""
    first = ranks[0]
    per_step = point["per_device_batch"] * point["grad_accum"] * first["world_size"]
    samples = (first["steps"] - first["resumed_from_step"] - first["warmup_steps"]) * per_step
    metrics = {
        "train_runtime_s": first["runtime_s"], "steps": first["steps"],
        "throughput_warmup_steps": first["warmup_steps"],
        "samples_per_s": samples / first["timed_s"],
        "tokens_per_s": samples * point["max_seq_length"] / first["timed_s"],
        "final_loss": first["losses"][-1] if first["losses"] else math.nan,
        "losses": first["losses"], "peak_memory_bytes": [r["peak_memory_bytes"] for r in ranks],
        "peak_memory_method": CPU_PEAK if first["device"] == "cpu" else "max_memory_allocated",
        "clean_measurement": first["resumed_from_step"] == 0,
    }  # fmt: skip
    if first["resumed_from_step"]:  # the speed covers this run's steps only
        metrics["resumed_from_step"] = first["resumed_from_step"]
    if first["device"] == "hpu":
        metrics["gaudi_mode"] = strategies.gaudi_mode(point)
    return {
        "status": "ok", "point": point, "world_size": first["world_size"],
        "device": first["device"], "metrics": metrics,
        "model_state_bytes": [r["model_state_bytes"] for r in ranks],
        "notes": {"warmup_ratio": WARMUP_NOTE}, "versions": package_versions(),
    }  # fmt: skip


def ensure_gaudi_mode(point: dict[str, Any], argv: list[str]) -> None:
    """Habana's bridge reads PT_HPU_LAZY_MODE once, as `import torch` loads it (autoloaded
    since SynapseAI 1.18): a rank started without the point's mode restarts itself with it."""
    wanted = strategies.gaudi_env(point)
    if importlib.util.find_spec("habana_frameworks") is None or all(
        os.environ.get(key) == value for key, value in wanted.items()
    ):
        return
    os.environ.update(wanted)
    os.execv(sys.executable, [sys.executable, "-m", "accelstudy.finetune.train", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--point", type=json.loads, required=True, help="the sweep point")
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    ensure_gaudi_mode(args.point, argv)
    return ranks.run(
        args.point, args.out,
        work=lambda: run_point(args.point, args.model_dir, args.out),
        summarise=lambda measured: summarise(args.point, measured),
        # every rank has finished training: its checkpoints are spent
        finished=lambda: shutil.rmtree(checkpoint_dir(args.out), ignore_errors=True),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
