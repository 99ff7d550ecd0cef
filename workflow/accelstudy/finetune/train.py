"""One fine-tuning point on this rank, under torchrun or alone (see accelstudy.ranks).
A retry resumes from the newest `checkpoint_steps` checkpoint; its speed is then not clean."""

import gc

if __name__ == "__main__":  # a rank's program: no collection among its imports (timeline.starting)
    gc.disable()

import argparse
import functools
import importlib.util
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
from accelerate import init_empty_weights
from datasets import Dataset
from peft import LoraConfig, TaskType, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, default_data_collator
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from accelstudy import random_source, ranks, timeline
from accelstudy.data.instructions import concatenated_blocks, load_examples
from accelstudy.device import DTYPES, Device, host_peak_rss
from accelstudy.errors import StudyError
from accelstudy.files import read_json, sha256_file, write_json
from accelstudy.finetune import engines
from accelstudy.kinds import KINDS
from accelstudy.models import DTYPE_KWARG, causal_lm_class, load_model_config, model_files
from accelstudy.points import FinetunePoint
from accelstudy.snapshots import weights_dir
from accelstudy.strategies import STRATEGIES, Loads

DIGESTS = "accelstudy-digests.json"  # sha256 of each file of a checkpoint, as its run saved it
OOM_HOOK = "ACCELSTUDY_TEST_RAISE_OOM"  # "1": every rank raises OutOfMemoryError in step 1
WARMUP_NOTE = "lr_scheduler constant ignores warm-up: the authors' warmup_ratio 0.03 had no effect"


class Meter(TrainerCallback):
    """The clock, this run's losses and the model-state bytes held after each optimizer step."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.times: dict[str, float] = {}
        self.held: dict[str, int] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = state.global_step
        self.times["begin"] = time.perf_counter()
        if not self.warmup_steps:  # no warm-up: timed from the first step
            self.times["warm"] = self.times["begin"]
        timeline.mark("ready")

    def on_step_begin(self, args, state, control, **kwargs):
        if os.environ.get(OOM_HOOK) == "1":
            raise torch.OutOfMemoryError(f"out of memory (test hook {OOM_HOOK})")

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        """After each step and, from the second on, just before it, where an engine's reduced
        gradients live until its step (ZeRO-1/2): the most of each kind."""
        engine = getattr(optimizer, "optimizer", optimizer)
        if not self.held:
            torch_optimizer = getattr(engine, "optimizer", engine)
            torch_optimizer.register_step_pre_hook(lambda *_: self.hold(model, engine))
        self.hold(model, engine)

    def hold(self, model: torch.nn.Module, optimizer: Any) -> None:
        counts = engines.held_bytes(model, optimizer)
        self.held = {key: max(value, self.held.get(key, 0)) for key, value in counts.items()}

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step - self.start == self.warmup_steps:
            self.times["warm"] = time.perf_counter()
            timeline.mark("measured")

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:  # what resume may trust: this run's own files
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            write_json(folder / DIGESTS, checkpoint_digests(folder))
        ranks.killed_at(state.global_step)  # the test hook: dies after this checkpoint

    def on_train_end(self, args, state, control, **kwargs):
        self.times["end"] = time.perf_counter()
        timeline.mark("done")
        logged = [e for e in state.log_history if "loss" in e and e["step"] > self.start]
        self.losses = [float(entry["loss"]) for entry in logged]

    def measured(self, steps: int, point: FinetunePoint, world: int) -> ranks.Measured:
        """Speed timed from the end of the warm-up; a run resumed past it, from its restart
        (its record is marked not clean); a fresh run that timed nothing fails."""
        warmed = "warm" in self.times and steps - self.start > self.warmup_steps
        if not (warmed or self.start):
            raise StudyError(point.untimed() or f"{steps} steps: none timed after the warm-up")
        warmup, end = self.warmup_steps if warmed else 0, self.times["end"]
        timed_s = end - self.times["warm" if warmed else "begin"]
        samples = (steps - self.start - warmup) * point.samples_per_step * world
        metrics: dict[str, Any] = {"train_runtime_s": end - self.times["begin"], "steps": steps}
        metrics.update(throughput_warmup_steps=warmup, samples_per_s=samples / timed_s)
        metrics["tokens_per_s"] = samples * point.max_seq_length / timed_s
        metrics.update(final_loss=self.losses[-1] if self.losses else math.nan, losses=self.losses)
        return {"resumed_from_step": self.start, "model_state_bytes": self.held, "metrics": metrics}


def decoder_layer_classes(model_dir: Path) -> list[str]:
    """What FSDP wraps: the no-split modules' classes as built (on Gaudi, optimum-habana's, which
    it swaps in after the planner may have cached a model: so built anew here)."""
    causal_lm_class(weights_dir(model_dir))  # its code's import charged to imports
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(load_model_config(model_dir))
    wanted, classes = set(model._no_split_modules), {type(m) for m in model.modules()}
    return sorted({c.__name__ for c in classes if wanted & {base.__name__ for base in c.mro()}})


def rank_device(point: FinetunePoint, device_kind: str) -> str:
    """Where a random-weight model is made: on this rank's card where every rank holds it whole
    (DDP); on the CPU where it is sharded after (FSDP from rank 0; ZeRO-3 under zero.Init)."""
    whole = STRATEGIES[point.strategy].loads is Loads.EVERY_RANK
    kind = KINDS[device_kind]
    on_card = whole and kind.random_on_card
    return f"{kind.torch_type}:{os.environ.get('LOCAL_RANK', '0')}" if on_card else "cpu"


def load_model(
    model_dir: Path, point: FinetunePoint, device_kind: str = "cpu"
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """The model and LoRA adapters in the point's dtype; a rank that does not load gets untouched
    parameters (distinct: accelerate maps them by address) and real buffers (RoPE's tables)."""
    weights = str(weights_dir(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(weights)
    kwargs: dict[str, Any] = {DTYPE_KWARG: DTYPES[point.dtype]}
    if not KINDS[device_kind].habana:
        kwargs["attn_implementation"] = engines.ATTENTION[point.attention]
    # all ranks but under torch's FSDP, where rank 0 alone loads (RAM-efficient loading)
    alone = STRATEGIES[point.strategy].loads is Loads.RANK_ZERO and not KINDS[device_kind].habana
    if not alone or os.environ.get("RANK", "0") == "0":
        timeline.current().read_model_files(model_files(Path(weights)))
        if random_source.is_random(Path(weights)):  # no weights on disk: made in the dtype
            model = random_source.build(Path(weights), rank_device(point, device_kind), **kwargs)
        else:
            model = AutoModelForCausalLM.from_pretrained(weights, use_safetensors=True, **kwargs)
    else:
        with init_empty_weights(include_buffers=False):
            model = AutoModelForCausalLM.from_config(load_model_config(model_dir), **kwargs)
        buffers = [(module, dict(module._buffers)) for module in model.modules()]
        model.to_empty(device="cpu")
        for module, kept in buffers:
            module._buffers.update(kept)
        model.tie_weights()
    model.config.use_cache = False
    if point.method != "lora":
        return model, tokenizer
    lora, causal = point.lora, TaskType.CAUSAL_LM
    shape: dict[str, Any] = dict(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout)
    adapters = LoraConfig(**shape, target_modules=list(lora.targets), bias="none", task_type=causal)
    torch.manual_seed(point.seed)  # LoRA's A: the same start whichever way the model loaded
    return get_peft_model(model, adapters, autocast_adapter_dtype=False), tokenizer


def checkpoint_dir(out: Path) -> Path:
    """Beside the result, not in the scratch directory, so that a restarted job finds it."""
    return out.with_name(out.name + ".checkpoints")


def checkpoint_digests(folder: Path) -> dict[str, str]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != DIGESTS)
    return {p.relative_to(folder).as_posix(): sha256_file(p) for p in files}


def last_checkpoint(directory: Path) -> Path | None:
    """The newest checkpoint whose files are the ones its run recorded (resume unpickles them:
    DeepSpeed's torch.load(weights_only=False)); one changed or added since is not resumed."""
    listed = [(d.parent, read_json(d)) for d in directory.glob(f"checkpoint-*/{DIGESTS}")]
    done = [folder for folder, digests in listed if checkpoint_digests(folder) == digests]
    return max(done, key=lambda path: int(path.name.rpartition("-")[2]), default=None)


def run_point(point: FinetunePoint, model_dir: Path, out: Path, device: Device) -> ranks.Measured:
    # the launcher's OMP_NUM_THREADS wins (torchrun sets 1 where none is given)
    for key, value in engines.process_env().items():
        os.environ.setdefault(key, value)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    with timeline.phase("device"):
        engines.prepare_state(point.strategy, device.kind)
    baseline = psutil.Process().memory_info().rss
    device.reset_peak_memory()
    kept = checkpoint_dir(out) if point.checkpoint_steps else None
    with tempfile.TemporaryDirectory(prefix="accelstudy-ft-") as scratch:
        with timeline.phase("model"):
            layers = decoder_layer_classes(model_dir)
        with timeline.phase("device"):  # the process group: accelerate's state, made on first use
            args = engines.training_arguments(point, kept or Path(scratch), device.kind, layers)
            _ = args.device
        with timeline.phase("model"):
            model, tokenizer = load_model(model_dir, point, device.kind)  # after args: zero.Init
        loaded = psutil.Process().memory_info().rss - baseline
        # exactly the blocks the steps consume: steps x batch x accumulation x ranks
        needed = point.max_steps * point.samples_per_step * args.world_size
        with timeline.phase("data"):
            examples = load_examples(point.data or {"source": "standin"})
            blocks = concatenated_blocks(examples, tokenizer, point.max_seq_length, limit=needed)
            data = Dataset.from_dict(blocks)
        meter = Meter(point.throughput_warmup_steps)
        kwargs = dict(train_dataset=data, data_collator=default_data_collator, callbacks=[meter])
        trainer = engines.trainer(point, device.kind, model, args, **kwargs)
        resume = last_checkpoint(kept) if kept else None
        steps = trainer.train(resume_from_checkpoint=str(resume) if resume else None).global_step
    peak = device.peak_memory_bytes() - (baseline if device.spec.host else 0)
    measured = {"device": device.kind, "world_size": args.world_size, "peak_memory_bytes": peak}
    measured |= {"host_peak_rss": host_peak_rss(), "load_rss_growth": loaded}
    return {**measured, **meter.measured(steps, point, args.world_size)}


def summarise(point: FinetunePoint, out: Path, measured: list[ranks.Measured]) -> dict[str, Any]:
    """Rank 0's clock and losses, every rank's memory and state bytes; spent checkpoints go."""
    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)
    first, resumed = measured[0], measured[0]["resumed_from_step"]
    metrics = ranks.peak_metrics(measured, "before the model loads")
    metrics["clean_measurement"] = resumed == 0
    metrics |= {"resumed_from_step": resumed} if resumed else {}  # the speed: this run's steps only
    metrics |= {"gaudi_mode": point.hpu_mode()} if KINDS[first["device"]].habana else {}
    metrics["model_state_bytes"] = [m["model_state_bytes"] for m in measured]
    for key in ("host_peak_rss", "load_rss_growth"):  # the ranks in order, node by node
        metrics[f"{key}_per_rank"] = [m[key] for m in measured]
    result = dict(point=point.as_dict(), world_size=first["world_size"], device=first["device"])
    return {**result, "metrics": metrics, "notes": {"warmup_ratio": WARMUP_NOTE}}


def ensure_gaudi_mode(point: FinetunePoint, argv: list[str]) -> None:
    """Habana's bridge reads PT_HPU_LAZY_MODE once, as `import torch` loads it (autoloaded since
    SynapseAI 1.18): a rank started without the point's mode restarts itself with it."""
    wanted = point.hpu_env()
    if wanted.items() <= os.environ.items() or not importlib.util.find_spec("habana_frameworks"):
        return
    os.environ.update(wanted)
    os.execv(sys.executable, [sys.executable, "-m", "accelstudy.finetune.train", *argv])


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # a rank's program: its start-up until now is imports
        timeline.imported()
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--point", type=FinetunePoint.from_json, required=True)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    ensure_gaudi_mode(args.point, argv)
    work = functools.partial(run_point, args.point, args.model_dir, args.out)
    return ranks.run(args.point, args.out, work, functools.partial(summarise, args.point, args.out))


if __name__ == "__main__":
    ranks.exit_now(main())
