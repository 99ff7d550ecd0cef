"""The Gaudi path without a Gaudi: optimum-habana replaced at its boundary by recorders, so
the arguments the worker hands GaudiTrainingArguments, GaudiConfig and GaudiTrainer are
checked per strategy and mode; and the MPIJob template for points beyond one node."""

from __future__ import annotations

import json
import re
import shlex
import sys
import types
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from accelstudy import strategies
from accelstudy.cli import build_parser
from accelstudy.finetune import engines, train
from accelstudy.points import FinetunePoint, Lora

ROOT = Path(__file__).resolve().parents[1]


def make_point(strategy: str, gaudi_mode: str = "lazy", attention: str = "fused") -> FinetunePoint:
    mode = dict(strategy=strategy, gaudi_mode=gaudi_mode, attention=attention)
    return FinetunePoint(
        **mode, cards=8, max_steps=4, max_seq_length=64, lora=Lora(rank=8, alpha=8)
    )


class Recorder:
    """Keeps the keyword arguments it was built with, as attributes too."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        vars(self).update(kwargs)


class FakeGaudiConfig(Recorder):
    read: ClassVar[list[str]] = []

    @classmethod
    def from_pretrained(cls, path: str) -> FakeGaudiConfig:
        cls.read.append(path)
        return cls(**json.loads(Path(path).read_text()))


class FakeGaudiTrainer(Recorder):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        plugin = types.SimpleNamespace(auto_wrap_policy=None)
        self.accelerator = types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=plugin))


@pytest.fixture
def habana(monkeypatch):
    """optimum.habana as the worker imports it; adapting swaps in a Gaudi decoder layer."""
    from transformers.models.llama import modeling_llama

    gaudi_layer = type("GaudiLlamaDecoderLayer", (modeling_llama.LlamaDecoderLayer,), {})
    adapted: list[bool] = []

    def adapt_transformers_to_gaudi():
        adapted.append(True)
        monkeypatch.setattr(modeling_llama, "LlamaDecoderLayer", gaudi_layer)

    modules = {
        "optimum": types.ModuleType("optimum"),
        "optimum.habana": types.ModuleType("optimum.habana"),
        "optimum.habana.transformers": types.ModuleType("optimum.habana.transformers"),
        "optimum.habana.transformers.modeling_utils": types.ModuleType("modeling_utils"),
    }
    modules["optimum.habana"].__dict__.update(
        GaudiTrainingArguments=Recorder, GaudiTrainer=FakeGaudiTrainer, GaudiConfig=FakeGaudiConfig
    )
    modules[
        "optimum.habana.transformers.modeling_utils"
    ].adapt_transformers_to_gaudi = adapt_transformers_to_gaudi
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(FakeGaudiConfig, "read", [])
    return adapted


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from accelstudy.models import save_prepared, tiny_random_llama

    path = tmp_path_factory.mktemp("gaudi") / "tiny"
    save_prepared(*tiny_random_llama(layers=2, hidden=64, heads=4, kv_heads=2), path)
    return path


CASES = [  # strategy, gaudi_mode asked, mode that runs
    ("ddp", "lazy", "lazy"),
    ("ddp", "compile", "compile"),
    ("zero3", "lazy", "lazy"),
    ("fsdp", "lazy", "compile"),  # FSDP on Gaudi only under torch.compile
]


@pytest.mark.parametrize(("strategy", "asked", "mode"), CASES)
def test_gaudi_training_arguments(habana, strategy, asked, mode, tmp_path):
    point = make_point(strategy, asked)
    args = engines.training_arguments(point, tmp_path, "hpu", ["GaudiLlamaDecoderLayer"]).kwargs
    compiled = mode == "compile"
    assert point.hpu_mode() == mode
    assert point.hpu_env() == {"PT_HPU_LAZY_MODE": "0" if compiled else "1"}
    assert args["use_habana"] is True and args["use_lazy_mode"] is not compiled
    assert args["gaudi_config_name"] == str(ROOT / "envs" / "gaudi" / "gaudi_config.json")
    assert args["throughput_warmup_steps"] == 3 and args["save_strategy"] == "no"
    assert (args["bf16"], args["lr_scheduler_type"], args["max_grad_norm"]) == (
        True,
        "constant",
        0.3,
    )
    compile_args = {
        "torch_compile": True,
        "torch_compile_backend": "hpu_backend",
        "pipelining_fwd_bwd": False,
    }
    assert {k: args[k] for k in compile_args if k in args} == (compile_args if compiled else {})
    assert args.get("deepspeed") == (
        strategies.deepspeed_config(point) if strategy == "zero3" else None
    )
    if strategy == "fsdp":
        assert args["fsdp"] == "full_shard auto_wrap"
        assert args["fsdp_config"] == {
            "transformer_layer_cls_to_wrap": ["GaudiLlamaDecoderLayer"],
            "backward_prefetch": "BACKWARD_PRE",
            "forward_prefetch": False,
            "use_orig_params": True,
            "sync_module_states": True,
            "state_dict_type": "FULL_STATE_DICT",
            "activation_checkpointing": False,
        }
    else:
        assert "fsdp" not in args


@pytest.mark.parametrize(("strategy", "asked", "mode"), CASES)
def test_gaudi_trainer_reads_the_shipped_config(habana, model_dir, strategy, asked, mode):
    attention = "eager" if strategy == "zero3" else "fused"  # eager: Habana's flash attention off
    point = make_point(strategy, asked, attention)
    model, _ = train.load_model(model_dir, point, "hpu")
    trainer = engines.trainer(point, "hpu", model, args="the args", callbacks=[])
    shipped = ROOT / "envs" / "gaudi" / "gaudi_config.json"
    assert FakeGaudiConfig.read == [str(shipped)]
    assert trainer.gaudi_config.kwargs == json.loads(shipped.read_text())
    assert trainer.args == "the args" and trainer.model is model
    fused = point.attention == "fused"
    flags = model.generation_config
    assert (flags.use_flash_attention, flags.flash_attention_causal_mask) == (fused, fused)
    assert getattr(flags, "use_fused_rope", True) is (mode == "lazy")
    policy = trainer.accelerator.state.fsdp_plugin.auto_wrap_policy
    assert callable(policy) if strategy == "fsdp" else policy is None


def test_fsdp_wraps_the_decoder_layer_gaudi_built(habana, model_dir):
    assert train.decoder_layer_classes(model_dir) == ["LlamaDecoderLayer"]
    engines.prepare_state("fsdp", "hpu")
    assert habana == [True]
    assert train.decoder_layer_classes(model_dir) == ["GaudiLlamaDecoderLayer"]


def test_a_rank_restarts_itself_in_the_points_mode(monkeypatch):
    real_find_spec = train.importlib.util.find_spec
    monkeypatch.setattr(
        train.importlib.util,
        "find_spec",
        lambda name, *rest: (
            object() if name == "habana_frameworks" else real_find_spec(name, *rest)
        ),
    )
    restarts: list[list[str]] = []
    monkeypatch.setattr(train.os, "execv", lambda exe, argv: restarts.append(argv))
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1")
    train.ensure_gaudi_mode(make_point("ddp"), ["--out", "r.json"])
    assert restarts == []
    train.ensure_gaudi_mode(make_point("fsdp"), ["--out", "r.json"])
    assert restarts[0][1:] == ["-m", "accelstudy.finetune.train", "--out", "r.json"]
    assert train.os.environ["PT_HPU_LAZY_MODE"] == "0"


def test_shipped_gaudi_config_is_habana_llamas():
    shipped = json.loads((ROOT / "envs" / "gaudi" / "gaudi_config.json").read_text())
    assert shipped == {
        "use_fused_adam": True,
        "use_fused_clip_norm": True,
        "use_torch_autocast": True,
    }


def test_mpijob_runs_one_point_with_the_rules_command():
    job = yaml.safe_load((ROOT / "profiles" / "voyager" / "mpijob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    assert job["spec"]["slotsPerWorker"] == 8
    specs = job["spec"]["mpiReplicaSpecs"]
    assert specs["Launcher"]["replicas"] == 1 and specs["Worker"]["replicas"] >= 2
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    for side in ("requests", "limits"):
        assert worker["resources"][side]["habana.ai/gaudi"] == 8
        assert "hugepages-2Mi" in worker["resources"][side]
    launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
    for container in (launcher, worker):
        env = {e["name"]: e["value"] for e in container["env"]}
        assert (env["PT_HPU_LAZY_MODE"], env["PT_HPU_MAX_COMPOUND_OP_SIZE"]) == ("1", "2")
    forwarded = {e["name"]: e["value"] for e in launcher["env"]}["OMPI_MCA_mca_base_env_list"]
    assert {"MASTER_ADDR", "PT_HPU_LAZY_MODE"} <= set(forwarded.split(";"))

    script = launcher["args"][0]
    command = shlex.split(script[script.index("accelstudy finetune") :])
    rule = (ROOT / "workflow" / "rules" / "finetune.smk").read_text().split("rule finetune:")[1]
    assert set(re.findall(r"--[a-z-]+", " ".join(command))) == set(
        re.findall(r"(--[a-z-]+) \{", rule)
    )
    filled = [make_point("zero3").to_json() if arg == "$POINT" else arg for arg in command]
    args = build_parser().parse_args(filled[1:])
    assert args.command == "finetune" and args.point == make_point("zero3")
