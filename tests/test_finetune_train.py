"""Fine-tuning points run for real on CPU: each strategy under torchrun with 2 processes
(gloo), the sharding proven by the bytes each rank holds; out of memory is a result, any
other error is a failure; the data is prepared as optimum-habana's run_lora_clm.py does."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from accelstudy.data.instructions import (
    PROMPT_DICT,
    concatenated_blocks,
    load_examples,
    prompt_text,
)
from accelstudy.data.sources import DataSourceError
from accelstudy.kinds import DeviceKind
from accelstudy.points import FinetunePoint, Lora
from accelstudy.ranks import KILL_HOOK
from accelstudy.strategies import DEEPSPEED, Strategy

# ZeRO-2, registered here alone (its ranks by register_and_train): the parameters stay whole;
# its step holds the gradient partition in FP32 beside the master's
ZERO2 = Strategy("zero2", "ZeRO-2", DEEPSPEED, shards=frozenset({"gradients", "optimizer"}),
                 gradient_bytes=4, optimizer_bytes=12, flat_optimizer=True)  # fmt: skip
# a device kind registered here alone: the CPU under another name
CPU2 = DeviceKind("cpu2", "cpu", "gloo", host=True)

WORKER = ["-m", "accelstudy.finetune.train"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
# bytes per element each strategy keeps under bf16: accelerate's FSDP upcasts the trainable
# parameters to fp32 (their fp32 copy is the master); ZeRO-3 keeps a separate fp32 master
ELEMENT_BYTES = {"ddp": (2, 2), "fsdp": (4, 2), "zero3": (2, 2)}


def make_point(strategy: str, **overrides) -> FinetunePoint:
    """A 2-rank LoRA point (rank 8) on 64-token blocks. DeepSpeed keeps parameters under 1e5
    elements whole on every rank: all of a tiny model's are, so shard them too to see it."""
    lora = Lora(rank=8, alpha=8)
    point = FinetunePoint(strategy=strategy, cards=2, max_steps=4, max_seq_length=64, lora=lora)
    return point.replace(zero3_persistence_threshold=0, **overrides)


def run_worker(point: FinetunePoint, model_dir, out, processes=2, env=None):
    """The rank's program under torchrun (processes=0: one process without it); a strategy of
    this module's (ZERO2) or a device kind (CPU2) is registered in each rank first."""
    launcher = [*TORCHRUN, str(processes)] if processes else [sys.executable]
    worker = WORKER
    if point.strategy == ZERO2.name or point.device == CPU2.name:
        code = "import tests.test_finetune_train as t; t.register_and_train()"
        worker = ["--no-python", sys.executable, "-c", code] if processes else ["-c", code]
        env = {**(env or {}), "PYTHONPATH": str(Path(__file__).parents[1])}
    command = [*launcher, *worker, "--point", point.to_json()]
    command += ["--model-dir", str(model_dir), "--out", str(out)]
    return subprocess.run(
        command, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=600
    )


def register_and_train() -> None:
    """A rank's program with ZERO2 and CPU2 in their registries (run_worker)."""
    from accelstudy import kinds, ranks, strategies
    from accelstudy.finetune import train

    strategies.STRATEGIES[ZERO2.name] = ZERO2
    kinds.KINDS[CPU2.name] = CPU2
    ranks.exit_now(train.main())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from accelstudy.models import save_prepared, tiny_random_llama

    path = tmp_path_factory.mktemp("finetune") / "tiny"
    save_prepared(*tiny_random_llama(layers=2, hidden=64, heads=4, kv_heads=2), path)
    return path


@pytest.fixture(scope="module")
def full_numel(model_dir):
    """(trainable, frozen) element counts of the LoRA'd model, as one process holds it."""
    from accelstudy.finetune.train import load_model

    model, _ = load_model(model_dir, make_point("ddp", dtype="float32"))
    params = list(model.parameters())
    return (
        sum(p.numel() for p in params if p.requires_grad),
        sum(p.numel() for p in params if not p.requires_grad),
    )


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "zero3"])
def test_two_processes_shard_as_the_strategy_says(strategy, model_dir, full_numel, tmp_path):
    """The bytes each rank holds: the share the strategy says, and the planner's prediction."""
    from tests.test_finetune_plan import assert_states_as_planned

    out = tmp_path / "result.json"
    finished = run_worker(make_point(strategy), model_dir, out)
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "ok" and result["world_size"] == 2
    metrics = result["metrics"]
    assert metrics["steps"] == 4 and metrics["throughput_warmup_steps"] == 3
    assert math.isfinite(metrics["final_loss"]) and metrics["tokens_per_s"] > 0
    assert len(metrics["peak_memory_per_rank"]) == 2

    trainable_size, frozen_size = ELEMENT_BYTES[strategy]
    full = {
        "params_trainable": full_numel[0] * trainable_size,
        "params_frozen": full_numel[1] * frozen_size,
    }
    share = 1.0 if strategy == "ddp" else 0.5
    ranks = metrics["model_state_bytes"]
    for held in ranks:
        for key, total in full.items():
            assert held[key] == pytest.approx(share * total, rel=0.02), (key, held)
        assert held["params_whole_copies"] == 0
        assert held["grads"] > 0 and held["optimizer_states"] > 0
    if strategy == "zero3":  # fp32 master partitions, Adam's two states of them
        master = full_numel[0] * 4 * share
        for held in ranks:
            assert held["master_fp32"] == pytest.approx(master, rel=0.02)
            assert held["optimizer_states"] == pytest.approx(2 * master, rel=0.02)
    assert_states_as_planned(model_dir, make_point(strategy), metrics)


def test_a_strategy_with_ten_times_the_learning_rate_is_flagged(model_dir, tmp_path):
    """At equal cards, seed, data and steps DDP, ZeRO-3 and FSDP (bf16) train the same model
    within report.agreement's tolerance; ZeRO-3 at 10x the learning rate is flagged. A random
    tiny model learns slowly, so the base rate is 1e-2 (at 3e-4, 10x moves its loss by less
    than the tolerance in 6 steps; SmolLM2's by 5.0% at the second step)."""
    from accelstudy.report.agreement import agreement

    rows = []
    for name, rate, repeat in [("ddp", 1e-2, 0), ("zero3", 1e-2, 0), ("fsdp", 1e-2, 0),
                               ("ddp", 1e-2, 1), ("zero3", 1e-1, 1)]:  # fmt: skip
        point = make_point(name, cards=1, max_steps=6, learning_rate=rate)
        out = tmp_path / f"{name}-{repeat}.json"
        finished = run_worker(point, model_dir, out, processes=0)
        assert finished.returncode == 0, finished.stderr[-3000:]
        losses = json.loads(out.read_text())["metrics"]["losses"]
        assert len(losses) == 6
        rows.append({"stage": "finetune", "status": "ok", "model": "tiny", "system": "cpu",
                     "strategy": name, "attention": "fused", "cards": 1, "repeat": repeat,
                     "seed": point.seed, "max_steps": 6, "losses": losses, "record": str(out)})  # fmt: skip
    checked = agreement(pd.DataFrame(rows)).set_index(["repeat", "strategy"])
    assert list(checked.loc[0, "verdict"]) == ["agrees", "agrees"]  # ZeRO-3, FSDP
    assert checked.loc[(1, "ddp"), "verdict"] == "agrees"  # a repeat: the same seed
    assert checked.loc[(1, "zero3"), "verdict"].startswith("flagged")
    assert checked.loc[(1, "zero3"), "deviation %"] > 2 * checked.loc[(1, "zero3"), "tolerance %"]


def test_out_of_memory_is_a_does_not_fit_result(model_dir, tmp_path):
    out = tmp_path / "result.json"
    env = {"ACCELSTUDY_TEST_RAISE_OOM": "1"}
    finished = run_worker(make_point("ddp"), model_dir, out, env=env)
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "does-not-fit"
    assert result["error"].startswith("torch.OutOfMemoryError:")


def test_another_error_exits_non_zero_and_writes_nothing(tmp_path):
    out = tmp_path / "result.json"
    out.write_text('{"status": "ok"}')  # an earlier run's result is never taken as this one's
    finished = run_worker(make_point("ddp"), tmp_path / "no-model", out, processes=0)
    assert finished.returncode != 0
    assert not out.exists()


def test_one_process_without_torchrun(model_dir, tmp_path):
    out = tmp_path / "result.json"
    point = make_point("zero3", cards=1, dtype="float32", max_steps=2, throughput_warmup_steps=1)
    finished = run_worker(point, model_dir, out, processes=0)
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 1 and result["metrics"]["throughput_warmup_steps"] == 1
    assert result["metrics"]["model_state_bytes"][0]["master_fp32"] > 0


def test_prompts_are_the_scripts_templates():
    with_input = {"instruction": "Add.", "input": "2 and 3", "output": "5"}
    assert prompt_text(with_input) == PROMPT_DICT["prompt_with_input"].format_map(with_input) + "5"
    assert prompt_text({"instruction": "Say hi.", "output": "Hi"}).endswith(
        "### Instruction:\nSay hi.\n\n### Response:Hi"
    )


def test_concatenation_cuts_full_blocks_with_eos_between_examples(tiny):
    _, tokenizer = tiny
    examples = load_examples({"source": "standin"})[:20]
    blocks = concatenated_blocks(examples, tokenizer, 512)
    assert (
        all(len(b) == 512 for b in blocks["input_ids"]) and blocks["labels"] == blocks["input_ids"]
    )
    stream = [t for b in blocks["input_ids"] for t in b]
    lengths = [len(tokenizer(prompt_text(e))["input_ids"]) for e in examples]
    assert len(stream) == sum(n + 1 for n in lengths) // 512 * 512  # EOS each, remainder dropped
    assert stream[lengths[0]] == tokenizer.eos_token_id
    truncated = concatenated_blocks(examples, tokenizer, 64, limit=3)["input_ids"]
    assert (
        len(truncated) == 3
        and truncated[1][0] == tokenizer(prompt_text(examples[1]))["input_ids"][0]
    )


def test_local_file_with_renamed_columns(tmp_path):
    path = tmp_path / "psychology.jsonl"
    rows = [{"question": "Why?", "answer": "Because."}, {"question": "How?", "answer": "So."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"source": "local", "file": str(path)}
    columns = {"instruction": "question", "output": "answer"}
    examples = load_examples({**spec, "columns": columns})
    assert examples[0] == {"instruction": "Why?", "input": "", "output": "Because."}
    with pytest.raises(DataSourceError, match=r"data\.columns\.instruction"):
        load_examples(spec)


def test_standin_is_real_text_in_instruction_shape():
    examples = load_examples({"source": "standin"})
    assert len(examples) > 100
    assert all(
        e["instruction"].startswith("Explain the Python documentation topic") for e in examples
    )
    assert sum(len(e["output"].split()) for e in examples) > 10_000
    assert torch.tensor([len(e["output"]) for e in examples]).float().mean() > 100


def test_a_killed_point_resumes_from_its_last_checkpoint(model_dir, tmp_path):
    out = tmp_path / "result.json"
    checkpoints = tmp_path / "result.json.checkpoints"
    point = make_point("ddp", cards=1, dtype="float32", checkpoint_steps=2)
    killed = run_worker(point, model_dir, out, processes=0, env={KILL_HOOK: "2"})
    assert killed.returncode != 0 and not out.exists()
    assert (checkpoints / "checkpoint-2" / "trainer_state.json").is_file()
    finished = run_worker(point, model_dir, out, processes=0)
    assert finished.returncode == 0, finished.stderr[-3000:]
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["steps"] == 4 and metrics["resumed_from_step"] == 2
    assert metrics["clean_measurement"] is False and metrics["tokens_per_s"] > 0
    assert not checkpoints.exists()


def test_a_checkpoint_changed_since_its_run_saved_it_is_not_resumed(tmp_path):
    """Resume unpickles a checkpoint: only one whose files are those its run recorded (the
    killed-point test above resumes from one) is taken; changed, added or unlisted: passed over."""
    from accelstudy.files import write_json
    from accelstudy.finetune.train import DIGESTS, checkpoint_digests, last_checkpoint

    for step in (2, 4):
        saved = tmp_path / f"checkpoint-{step}"
        (saved / "global_step").mkdir(parents=True)
        (saved / "trainer_state.json").write_text("{}")
        (saved / "global_step" / "states.pt").write_bytes(b"pickle")
        write_json(saved / DIGESTS, checkpoint_digests(saved))
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-4"
    (tmp_path / "checkpoint-4" / "global_step" / "states.pt").write_bytes(b"other pickle")
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    (tmp_path / "checkpoint-2" / "extra.pt").write_bytes(b"")
    assert last_checkpoint(tmp_path) is None
    (tmp_path / "checkpoint-6").mkdir()
    (tmp_path / "checkpoint-6" / "trainer_state.json").write_text("{}")  # no digests: not ours
    assert last_checkpoint(tmp_path) is None


def test_without_checkpoint_steps_a_rerun_starts_afresh(model_dir, tmp_path):
    out = tmp_path / "result.json"
    stale = tmp_path / "result.json.checkpoints" / "checkpoint-2"
    stale.mkdir(parents=True)
    (stale / "trainer_state.json").write_text("{}")  # a checkpoint the point does not ask for
    finished = run_worker(make_point("ddp", cards=1, dtype="float32"), model_dir, out, processes=0)
    assert finished.returncode == 0, finished.stderr[-3000:]
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["steps"] == 4 and metrics["clean_measurement"] is True
    assert "resumed_from_step" not in metrics
    assert list(tmp_path.iterdir()) == [out]  # nothing left behind


def test_a_strategy_registered_alone_trains_as_it_says(
    model_dir, full_numel, tmp_path, monkeypatch
):
    """ZeRO-2 in the registry and nowhere else: a config and CLI choice and a report label, and
    trained on 2 ranks, DeepSpeed at stage 2: each rank holds the parameters whole, half the
    gradients (FP32 at the step) and half the FP32 master and Adam's states, as planned."""
    from accelstudy import strategies
    from accelstudy.cli import build_parser
    from accelstudy.config import validate_config
    from accelstudy.report.finetuning import finetune_runs

    from tests.conftest import TINY_CONFIG
    from tests.test_finetune_plan import assert_states_as_planned

    monkeypatch.setitem(strategies.STRATEGIES, ZERO2.name, ZERO2)  # the schema follows, and
    # follows back when the test unregisters it (options._schema: per set of registered names)
    config = json.loads(json.dumps(TINY_CONFIG))
    config["finetune"]["strategies"] = ["ddp", "zero2"]
    assert validate_config(config)["finetune"]["strategies"] == ["ddp", "zero2"]
    argv = ["plan-memory", "--model", "m", "--strategy", "zero2"]
    assert build_parser().parse_args(argv).strategy == "zero2"
    records = pd.DataFrame(
        {"stage": "finetune", "strategy": ["zero2", "ddp"], "cards": 1, "status": "ok",
         "system": "cpu", "model": "m", "attention": "fused", "metric_samples_per_s": 1.0}
    )  # fmt: skip
    assert list(finetune_runs(records)["strategy"]) == ["DDP", "ZeRO-2"]  # label, in order

    point, out = make_point("zero2"), tmp_path / "result.json"
    finished = run_worker(point, model_dir, out)
    assert finished.returncode == 0, finished.stderr[-3000:]
    metrics = json.loads(out.read_text())["metrics"]
    trainable, frozen = full_numel
    for held in metrics["model_state_bytes"]:
        assert (held["params_trainable"], held["params_frozen"]) == (2 * trainable, 2 * frozen)
        assert held["grads"] == pytest.approx(2 * trainable, rel=0.02)  # FP32, half of them
        assert held["master_fp32"] == pytest.approx(2 * trainable, rel=0.02)
        assert held["optimizer_states"] == pytest.approx(4 * trainable, rel=0.02)
    assert_states_as_planned(model_dir, point, metrics)


def test_a_device_kind_registered_alone_trains_and_evaluates(model_dir, tmp_path, monkeypatch):
    """A kind in accelstudy.kinds and nowhere else (the CPU under the name cpu2): a system may
    name it, a point's 2 ranks train on it (gloo, their RSS as memory) and an evaluation runs on
    it, each record naming it."""
    from dataclasses import replace

    from accelstudy import kinds
    from accelstudy.data.sources import prepare_data
    from accelstudy.evaluate.baseline import baseline
    from accelstudy.systems import check_system, load_system

    monkeypatch.setitem(kinds.KINDS, CPU2.name, CPU2)
    check_system({"name": "x", "device": "cpu2", "cards_per_node": 2}, "a system file")
    out = tmp_path / "result.json"
    finished = run_worker(make_point("ddp", device=CPU2.name), model_dir, out)
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result["device"], result["world_size"], result["metrics"]["steps"]) == ("cpu2", 2, 4)
    assert result["metrics"]["peak_memory_method"].startswith("RSS growth")

    data = tmp_path / "test.jsonl"
    prepare_data("wikitext", {"source": "standin"}, "test", data)
    system = replace(load_system("cpu"), device=CPU2.name)
    flags = {"study": "t", "system": system, "model_name": "tiny", "model_dir": model_dir}
    flags |= {"task": "wikitext", "data": data, "data_source": "standin", "limit": 2}
    flags |= {"settings": {"block_size": 16, "batch_size": 1, "dtype": "float32"}}
    record = baseline(protocol="paper", out=tmp_path / "b.json", device_kind=CPU2.name,
                      items=tmp_path / "items.parquet", **flags)  # fmt: skip
    assert record["device"] == "cpu2" and math.isfinite(record["metrics"]["perplexity"])
