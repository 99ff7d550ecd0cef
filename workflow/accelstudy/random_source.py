"""`source: random`: a model built from its config.json alone, its weights random, made inside
each job on its device in the point's dtype and never written to disk. The published sweep's
speed and memory at full size (Llama-3.3-70B's shapes) without downloading or storing weights;
its quality means nothing, so every record says "random weights: speed and memory only" (the
manifest's `weights`, copied into each record's inputs.model beside `source: random`) and the
report keeps records of that source out of every quality table beside the published numbers."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelstudy.config import random_config
from accelstudy.files import atomic_directory
from accelstudy.snapshots import MANIFEST, ModelSourceError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

NOTE = "random weights: speed and memory only"
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def config_file(reference: str, base: Path | None = None) -> Path:
    """`config:` as given: a resources/models/<name> folder's name, or a path (relative to the
    working directory) to a config.json or to a folder holding one (checked before any job)."""
    if (found := random_config(reference, base or Path.cwd())) is None:
        raise ModelSourceError(f"config '{reference}': no config.json there")
    return found


def _ids(value: Any) -> list[int]:
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int)]


def synthetic_tokenizer(config: dict[str, Any]) -> PreTrainedTokenizerFast:
    """A byte-level BPE whose vocabulary is exactly the config's `vocab_size` (128,256 for
    Llama-3): the 256 byte symbols, then every pair of them, then pairs followed by a byte, as
    far as the size asks, their merges in that order; the config's BOS/EOS/PAD ids are its
    special tokens. Built from lists, not trained (instant at any size), it spreads text over
    ids across the whole table, so the embedding and the head see the ids a real one would."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    size, alphabet = int(config["vocab_size"]), sorted(pre_tokenizers.ByteLevel.alphabet())
    reserved = {i: f"<|special_{i}|>" for key in SPECIAL_IDS for i in _ids(config.get(key))}
    if not reserved:  # a config naming none: the last id ends a text
        reserved = {size - 1: f"<|special_{size - 1}|>"}
    pairs = ((a, b) for a in alphabet for b in alphabet)
    triples = ((a + b, c) for a in alphabet for b in alphabet for c in alphabet)
    symbols, free = list(alphabet), size - len(reserved) - len(alphabet)
    outside = sorted(i for i in reserved if not 0 <= i < size)
    if free < 0 or outside:
        why = f"special ids {outside} outside it" if outside else "fewer ids than 256 bytes"
        raise ModelSourceError(f"vocab_size {size} of this config: {why}")
    merges = list(itertools.islice(itertools.chain(pairs, triples), free))
    symbols += [left + right for left, right in merges]
    ordinary = iter(symbols)
    vocab = {reserved[i] if i in reserved else next(ordinary): i for i in range(size)}
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(reserved.values()))
    names = {key: _ids(config.get(key)) for key in SPECIAL_IDS}
    eos = reserved[(names["eos_token_id"] or [max(reserved)])[0]]
    pads = names["pad_token_id"]
    special = {"eos_token": eos, "pad_token": reserved[pads[0]] if pads else eos}
    if names["bos_token_id"]:  # Llama's tokenizers put BOS first
        bos = reserved[names["bos_token_id"][0]]
        special["bos_token"] = bos
        single = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]
        )
        tok.post_processor = single
    return PreTrainedTokenizerFast(tokenizer_object=tok, **special)


def prepare(spec: dict[str, Any], out: Path, seed: int) -> dict[str, Any]:
    """config.json and the synthetic tokenizer into `out` (atomically: a temporary folder, then
    renamed; never weights); what the manifest says of them."""
    source = config_file(spec["config"])
    text = source.read_text()
    config = json.loads(text)
    with atomic_directory(out) as tmp:
        (tmp / "config.json").write_text(text)
        synthetic_tokenizer(config).save_pretrained(tmp)
    digest = f"sha256:{hashlib.sha256(text.encode()).hexdigest()}"
    return {"config": spec["config"], "config_digest": digest, "seed": seed, "weights": NOTE}


def is_random(model_dir: Path) -> bool:
    """A prepared model of this source (its manifest says so): no weights to read."""
    manifest = Path(model_dir) / MANIFEST
    return manifest.is_file() and json.loads(manifest.read_text()).get("source") == "random"


def build(model_dir: Path, device: str | torch.device, **options: Any) -> PreTrainedModel:
    """The model of `model_dir`'s config, initialised as transformers does, directly on `device`
    and in the dtype `options` give (transformers' own keyword: from_config's), seeded by the
    manifest so that every rank and repeat starts from the same weights. Every stage makes its
    random model here, so none holds an FP32 copy on the host (a 70B's would be ~282 GB); one
    that cannot fit where it is asked for is refused, from its shapes on `meta`, before any
    allocation: torch's out-of-memory error, which fine-tuning records as does-not-fit."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    seed = json.loads((Path(model_dir) / MANIFEST).read_text()).get("seed", 0)
    config = AutoConfig.from_pretrained(str(model_dir))
    if (room := free_bytes(torch.device(device))) < math.inf:
        with torch.device("meta"):
            shapes = AutoModelForCausalLM.from_config(config, **options)
        tensors = [*shapes.parameters(), *shapes.buffers()]
        if (need := sum(t.numel() * t.element_size() for t in tensors)) > room:
            where = f"{torch.device(device)} has {room / 1e9:.3g} GB free"
            raise torch.OutOfMemoryError(f"random weights need {need / 1e9:.3g} GB; {where}")
    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, **options)


def free_bytes(device: torch.device) -> float:
    """What `device` has free now: the host's available memory, a CUDA card's free memory;
    unbounded where it is not known (meta, HPU)."""
    import psutil
    import torch

    if device.type == "cpu":
        return float(psutil.virtual_memory().available)
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    return math.inf
