"""`source: random`: a model prepared from its config alone (config.json, a synthetic tokenizer
over its whole vocabulary, a manifest; no weights on disk), made inside the job in the point's
dtype; its records say "random weights: speed and memory only"."""

from __future__ import annotations

import json

import pytest
import torch
from accelstudy import random_source
from accelstudy.models import load_prepared, prepare_model
from accelstudy.snapshots import identity
from transformers import AutoTokenizer, LlamaConfig

from tests.test_finetune_train import make_point, run_worker


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    """A Llama config of the tiny tests' shape, its BOS and EOS ids inside the vocabulary."""
    folder = tmp_path_factory.mktemp("random-config")
    sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2)
    sizes |= dict(num_attention_heads=4, num_key_value_heads=2, vocab_size=600)
    config = LlamaConfig(**sizes, bos_token_id=598, eos_token_id=599, tie_word_embeddings=False)
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(folder)
    return folder / "config.json"


@pytest.fixture(scope="module")
def prepared(tiny_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / "tiny-random-weights"
    manifest = prepare_model({"source": "random", "config": str(tiny_config)}, out, seed=3)
    return out, manifest


def test_prepared_holds_config_tokenizer_and_manifest_never_weights(prepared):
    out, manifest = prepared
    assert not list(out.glob("*.safetensors")) and not list(out.glob("*.bin"))
    assert {"config.json", "tokenizer.json", "manifest.json"} <= {p.name for p in out.iterdir()}
    assert manifest["weights"] == random_source.NOTE == "random weights: speed and memory only"
    assert manifest["dtype_on_disk"] == [] and manifest["config_digest"].startswith("sha256:")
    assert identity(out)["weights"] == random_source.NOTE  # what every record's inputs carry
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert len(tokenizer) == 600 and tokenizer.bos_token_id == 598 and tokenizer.eos_token_id == 599
    ids = tokenizer("Random weights, real shapes: the published sweep.")["input_ids"]
    assert ids[0] == 598 and max(ids) < 600 and max(ids) > 300  # past the bytes, into pairs


def test_the_model_is_made_in_the_dtype_asked_and_alike_each_time(prepared):
    out, _ = prepared
    first, _ = load_prepared(out, dtype=torch.bfloat16)
    again, _ = load_prepared(out, dtype=torch.bfloat16)
    weights = dict(first.named_parameters())
    assert {p.dtype for p in weights.values()} == {torch.bfloat16}
    assert all(torch.equal(p, dict(again.named_parameters())[n]) for n, p in weights.items())


def test_llama3_shapes_at_full_size_on_the_meta_device(tmp_path):
    """The paper's 8B from resources/models, made on `meta` (no memory): its 128,256-token
    vocabulary covered by the tokenizer, the parameters those of Llama-3.1-8B in BF16."""
    out = tmp_path / "llama-3.1-8b-instruct"
    prepare_model({"source": "random", "config": "llama-3.1-8b-instruct"}, out, seed=0)
    assert len(AutoTokenizer.from_pretrained(str(out))) == 128_256
    model = random_source.build(out, "meta", dtype=torch.bfloat16)
    parameters = list(model.parameters())
    assert {p.device.type for p in parameters} == {"meta"}
    assert {p.dtype for p in parameters} == {torch.bfloat16}
    assert 8.0e9 < sum(p.numel() for p in parameters) < 8.1e9


def test_a_fine_tuning_point_runs_on_random_weights(prepared, tmp_path):
    out, result = prepared[0], tmp_path / "result.json"
    point = make_point("ddp", cards=1, dtype="bfloat16", max_steps=2, throughput_warmup_steps=1)
    finished = run_worker(point, out, result, processes=0)
    assert finished.returncode == 0, finished.stderr[-3000:]
    measured = json.loads(result.read_text())
    assert measured["status"] == "ok" and measured["metrics"]["tokens_per_s"] > 0


@pytest.fixture
def made(monkeypatch):
    """What random_source.build made, in each call: the device asked for, the parameters' dtypes
    and devices, and whether any FP32 tensor of a parameter's shape was created on the way."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls, build = [], random_source.build

    class Created(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.fp32_shapes = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
                self.fp32_shapes.add(tuple(out.shape))
            return out

    def spy(model_dir, device, **options):
        with Created() as created:
            model = build(model_dir, device, **options)
        shapes = {tuple(p.shape) for p in model.parameters()}
        parameters = list(model.parameters())
        calls.append(
            {
                "device": torch.device(device),
                "dtypes": {p.dtype for p in parameters},
                "devices": {p.device for p in parameters},
                "fp32_copies": created.fp32_shapes & shapes,
            }
        )
        return model

    monkeypatch.setattr(random_source, "build", spy)
    return calls


def test_every_stage_makes_random_weights_on_its_device_in_its_dtype(prepared, made, tmp_path):
    """Baseline, sensitivity and quantization make the random model through random_source.build
    on the job's device in the dtype they compute in (sensitivity: FP32, what it compares), with
    no FP32 copy of a BF16 one; the records name the source the report filters on."""
    from accelstudy.data.sources import prepare_data
    from accelstudy.evaluate.baseline import baseline
    from accelstudy.ptq.quantize import quantize
    from accelstudy.ptq.sensitivity import sensitivity_chunk

    model_dir, data = prepared[0], tmp_path / "test.jsonl"
    prepare_data("wikitext", {"source": "standin"}, "test", data)
    settings = {"block_size": 16, "batch_size": 1, "dtype": "bfloat16"}
    flags = {"study": "t", "system": "cpu", "model_name": "r", "model_dir": model_dir}
    flags |= {"task": "wikitext", "data": data, "data_source": "standin", "settings": settings}
    flags |= {"limit": 1, "device_kind": "cpu", "items": tmp_path / "items.parquet"}
    records = [baseline(protocol="paper", out=tmp_path / "b.json", **flags)]
    scan = dict(granularity="layer", family="mlp", sparsity=0.5, chunks=1, chunk=0)
    sensitivity_chunk(
        model_dir=model_dir, task="wikitext", data=data, limit=1, settings=settings, **scan,
        prefix_reuse=True, out=tmp_path / "s.json", device_kind="cpu",
    )  # fmt: skip
    assignment = tmp_path / "a.json"
    assignment.write_text(json.dumps({"bits": [8, 4], "method": "x", "layer_bits": {0: 8, 1: 4}}))
    quantized = {"recipe": "fake", "assignment": assignment, "out": tmp_path / "q.json"}
    records.append(quantize(**flags | quantized))  # simulated: its stored bytes are the FP32's
    assert [c["dtypes"] for c in made] == [{torch.bfloat16}, {torch.float32}, {torch.bfloat16}]
    assert all(c["devices"] == {c["device"]} == {torch.device("cpu")} for c in made)
    assert made[0]["fp32_copies"] == made[2]["fp32_copies"] == set()
    assert made[1]["fp32_copies"]  # the spy sees FP32 parameters made, where they are asked for
    assert [r["inputs"]["model"]["source"] for r in records] == ["random", "random"]
    assert records[1]["metrics"]["model_compression_ratio"] == 1.0


def test_the_report_keeps_random_weights_out_by_their_source_not_by_words():
    """Quality tables drop the records whose inputs.model.source is `random`, whatever their
    note says (here reworded), and name the model so its sensitivity is dropped too."""
    import pandas as pd
    from accelstudy.report.collect import flatten
    from accelstudy.report.quantization import real_weights

    from tests.test_report import _record

    rows = []
    for model, source in (("read", "hf"), ("made", "random")):
        record = _record("wikitext", "paper", "perplexity", 19.5) | {"model": model}
        record["inputs"]["model"] = {"source": source, "weights": "reworded: quality meaningless"}
        rows.append(flatten(record))
    kept, random = real_weights(pd.DataFrame(rows))
    assert list(kept["model"]) == ["read"] and random == {"made"}
    assert real_weights(pd.DataFrame())[1] == set()  # no records: nothing to drop


def test_a_model_that_cannot_fit_is_refused_in_one_line_before_it_is_made(prepared, monkeypatch):
    """Its size from its shapes on `meta`, in the dtype asked: 2 bytes a value in BF16."""
    from accelstudy.models import DTYPE_KWARG

    bf16 = {DTYPE_KWARG: torch.bfloat16}
    values = sum(p.numel() for p in random_source.build(prepared[0], "meta", **bf16).parameters())
    monkeypatch.setattr(random_source, "free_bytes", lambda device: 1e5)
    with pytest.raises(torch.OutOfMemoryError) as refused:
        random_source.build(prepared[0], "cpu", **bf16)
    need = f"{2 * values / 1e9:.3g}"
    assert str(refused.value) == f"random weights need {need} GB; cpu has 0.0001 GB free"
