"""Per-layer (or per-projection) pruning sensitivity on a calibration set, with prefix reuse:
pruning layer l cannot change layers 0..l-1, so one unpruned pass keeps the hidden states entering
each layer to prune, and layer l reruns only layers l..L-1, the final norm and the LM head."""

import math
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from accelstudy import device as devices
from accelstudy.data.sources import read_prepared
from accelstudy.evaluate.multiple_choice import Score, decide, pad_right, tokenize_request
from accelstudy.evaluate.perplexity import paper_blocks, shifted_cross_entropy
from accelstudy.evaluate.prompts import ChoiceRequest
from accelstudy.files import write_json
from accelstudy.models import load_prepared
from accelstudy.pruning import chunk_sizes
from accelstudy.ptq import SCAN_KEYS
from accelstudy.ptq.prune import Target, decoder_layers, pruned, targets
from accelstudy.tasks import TASKS, ChoiceProtocol


@dataclass
class Calibration:
    """Token batches and, for accuracy tasks, what each row of each batch scores."""

    batches: list[torch.Tensor]
    protocol: ChoiceProtocol | None = None  # None: a perplexity task
    requests: list[ChoiceRequest] = field(default_factory=list)
    # per batch, each choice's row in it, where its continuation starts, and the continuation
    layouts: list[list[tuple[int, int, list[int]]]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return "perplexity" if self.protocol is None else "accuracy"

    @property
    def tokens(self) -> int:
        return sum(b.numel() for b in self.batches)

    def contribution(self, index: int, logits: torch.Tensor) -> tuple[float, int]:
        """(summed loss, count) for perplexity; (correct, 1) for accuracy."""
        if self.protocol is None:
            return shifted_cross_entropy(logits, self.batches[index].to(logits.device))
        logprobs = F.log_softmax(logits.float(), dim=-1)
        scores = []
        for row, start, cont in self.layouts[index]:
            picked = logprobs[row, start - 1 : start - 1 + len(cont)]
            targets = torch.tensor(cont, dtype=torch.long, device=picked.device)
            ll = picked.gather(1, targets[:, None]).sum()
            scores.append(Score(float(ll.double()), len(cont), False))
        request = self.requests[index]
        return float(decide(request, scores, self.protocol).prediction == request.gold), 1

    def metric(self, contributions: list[tuple[float, int]]) -> float:
        total, count = map(sum, zip(*contributions, strict=True))
        return math.exp(total / count) if self.kind == "perplexity" else total / count


def build_calibration(
    tokenizer: PreTrainedTokenizerBase, task: str, rows: list, limit: int | None, settings: dict
) -> Calibration:
    """The first `limit` blocks, batched, or items: each a batch of (context + choice)[:-1]s."""
    if TASKS[task].kind == "perplexity":
        blocks = paper_blocks(tokenizer, rows, settings["block_size"], limit)
        return Calibration(list(torch.split(blocks, settings["batch_size"])))
    spec, max_length = TASKS[task].protocols["paper"], settings[f"{task}_max_length"]
    calibration = Calibration([], spec)
    for row in rows[:limit] if limit else rows:
        request = spec.request(row)
        context, continuations = tokenize_request(tokenizer, request, spec, max_length)
        # choices whose inputs are equal (one-token ones: the context alone) share a row
        inputs = list(dict.fromkeys(tuple(context + c)[:-1] for c in continuations))
        calibration.batches.append(pad_right([list(i) for i in inputs]))
        calibration.requests.append(request)
        layout = [(inputs.index(tuple(context + c)[:-1]), len(context), c) for c in continuations]
        calibration.layouts.append(layout)
    return calibration


@dataclass(frozen=True)
class TargetScore:
    name: str
    layer: int
    metric: float
    score: float  # larger = more sensitive
    zeroed: int


class PrefixCache:
    """One unpruned pass: per batch, the hidden states entering `layers`, kwargs, contributions."""

    @torch.inference_mode()
    def __init__(self, model: PreTrainedModel, calibration: Calibration, layers: set[int]):
        self.model, self.calibration = model, calibration
        self.hidden: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
        self.kwargs: list[dict] = []

        def capture(index: int, _module: nn.Module, args: tuple, kwargs: dict) -> None:
            self.hidden[index].append((args[0] if args else kwargs["hidden_states"]).clone())
            if len(self.kwargs) < len(self.hidden[index]):  # the batch's first hooked layer
                self.kwargs.append({k: v for k, v in kwargs.items() if k != "hidden_states"})

        hooks = [(decoder_layers(model)[i], partial(capture, i)) for i in layers]
        handles = [layer.register_forward_pre_hook(h, with_kwargs=True) for layer, h in hooks]
        try:
            self.base = contributions(model, calibration)
        finally:
            for handle in handles:
                handle.remove()

    @torch.inference_mode()
    def rerun(self, start: int) -> list[tuple[float, int]]:
        """Each batch's contribution from running layers start..L-1 on its input to `start`."""
        parts = []
        for index, hidden in enumerate(self.hidden[start]):
            for layer in decoder_layers(self.model)[start:]:
                out = layer(hidden, **self.kwargs[index])
                hidden = out[0] if isinstance(out, tuple) else out
            logits = self.model.get_output_embeddings()(self.model.get_decoder().norm(hidden))
            parts.append(self.calibration.contribution(index, logits))
        return parts


@torch.inference_mode()
def contributions(model: nn.Module, calibration: Calibration) -> list[tuple[float, int]]:
    """Each batch's contribution from a forward pass of the whole model."""
    device = next(model.parameters()).device
    logits = (model(batch.to(device), use_cache=False).logits for batch in calibration.batches)
    return [calibration.contribution(i, x) for i, x in enumerate(logits)]


def scan(
    model: PreTrainedModel,
    calibration: Calibration,
    chunk: list[Target],
    sparsity: float,
    prefix_reuse: bool = True,
) -> tuple[float, list[TargetScore], dict[str, float]]:
    """(base metric, a score per target, timing) for the targets of one chunk."""
    started = time.perf_counter()
    cache = PrefixCache(model, calibration, {t.layer for t in chunk}) if prefix_reuse else None
    base = calibration.metric(cache.base if cache else contributions(model, calibration))
    results = []
    for target in tqdm(chunk, desc="sensitivity", unit="target"):
        with pruned(target, sparsity) as zeroed:
            parts = cache.rerun(target.layer) if cache else contributions(model, calibration)
        metric = calibration.metric(parts)
        # the damage pruning does: a rise in perplexity, a fall in accuracy (zero or less stays)
        score = metric - base if calibration.kind == "perplexity" else base - metric
        results.append(TargetScore(target.name, target.layer, metric, score, zeroed))
    wall = time.perf_counter() - started
    return base, results, {"wall_time_s": wall, "tokens": calibration.tokens * (len(chunk) + 1)}


def chunk_targets(all_targets: list[Target], chunks: int, index: int) -> list[Target]:
    """The index-th of `chunks` near-equal consecutive slices (the longer ones first)."""
    sizes = chunk_sizes(len(all_targets), chunks)
    return all_targets[sum(sizes[:index]) : sum(sizes[: index + 1])]


def sensitivity_chunk(
    *,
    model_dir: Path,
    task: str,
    data: Path,
    limit: int | None,
    settings: dict[str, Any],
    granularity: str,
    family: str,
    sparsity: float,
    chunks: int,
    chunk: int,
    prefix_reuse: bool,
    out: Path,
    device_kind: str = "auto",
) -> dict[str, Any]:
    """The `sensitivity` stage: prune each target of one chunk in turn; write its scores."""
    device = devices.resolve(device_kind)
    model, tokenizer = load_prepared(model_dir, device=device.torch)  # FP32: what it compares
    model.to(device.torch)  # type: ignore[arg-type]  # transformers wraps .to: mypy binds no self
    calibration = build_calibration(tokenizer, task, read_prepared(data), limit, settings)
    all_targets = targets(model, granularity, family)
    mine = chunk_targets(all_targets, chunks, chunk)
    base, scores, timing = scan(model, calibration, mine, sparsity, prefix_reuse)
    scanned = dict(zip(SCAN_KEYS, (granularity, family, sparsity, limit), strict=True))
    payload: dict[str, Any] = {"task": task, "metric": calibration.kind, "base": base, **scanned}
    payload |= {"chunk": chunk, "chunks": chunks, "n_targets": len(all_targets)}
    # shared by the systems of a study: which one made it (Snakemake's, through the environment)
    system = os.environ.get("ACCELSTUDY_SYSTEM", "unknown")
    payload |= {"prefix_reuse": prefix_reuse, "device": device.kind, "system": system}
    payload |= {"scores": [s.__dict__ for s in scores], **timing}
    write_json(out, payload)
    return payload
