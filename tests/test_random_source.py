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
