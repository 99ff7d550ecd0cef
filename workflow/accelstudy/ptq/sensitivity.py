"""Per-layer (or per-projection) pruning sensitivity, with prefix reuse: pruning layer l cannot
change what layers 0..l-1 compute, so the scan runs the unpruned model once, keeps the hidden
states entering each layer it will prune, and for layer l runs only layers l..L-1, the final
norm and the LM head. The naive scan (a full forward per target) is kept for the equivalence
test and the benchmark."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

from accelstudy.ptq.calibration import Calibration
from accelstudy.ptq.prune import Target, decoder_layers, pruned


@dataclass(frozen=True)
class TargetScore:
    name: str
    layer: int
    metric: float
    score: float  # larger = more sensitive
    zeroed: int


def orient(kind: str, pruned_metric: float, base: float) -> float:
    """Perplexity: pruned - base; accuracy: base - pruned. Zero and negative scores stay."""
    return pruned_metric - base if kind == "perplexity" else base - pruned_metric


class PrefixCache:
    """Hidden states entering chosen layers, and the layer kwargs, per calibration batch."""

    def __init__(self, model: nn.Module, calibration: Calibration, layers: set[int]):
        self.model = model
        self.calibration = calibration
        self.hidden: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
        self.kwargs: list[dict] = []
        self.base_contributions: list[tuple[float, int]] = []
        self._fill(layers)

    @torch.inference_mode()
    def _fill(self, layers: set[int]) -> None:
        modules = decoder_layers(self.model)
        captured: dict[str, dict] = {}

        def hook(index: int):
            def capture(_module, args, kwargs):
                hidden = args[0] if args else kwargs["hidden_states"]
                self.hidden[index].append(hidden.clone())
                captured.setdefault(
                    "kwargs", {k: v for k, v in kwargs.items() if k != "hidden_states"}
                )

            return capture

        handles = [modules[i].register_forward_pre_hook(hook(i), with_kwargs=True) for i in layers]
        try:
            device = next(self.model.parameters()).device
            for index, batch in enumerate(self.calibration.batches):
                captured.clear()
                logits = self.model(batch.to(device), use_cache=False).logits
                self.kwargs.append(captured["kwargs"])
                self.base_contributions.append(self.calibration.contribution(index, logits))
        finally:
            for handle in handles:
                handle.remove()

    @torch.inference_mode()
    def suffix_logits(self, start: int, index: int) -> torch.Tensor:
        """Logits from running layers start..L-1 on the cached input of layer `start`."""
        hidden = self.hidden[start][index]
        for layer in decoder_layers(self.model)[start:]:
            out = layer(hidden, **self.kwargs[index])
            hidden = out[0] if isinstance(out, tuple) else out
        hidden = self.model.get_decoder().norm(hidden)
        return self.model.get_output_embeddings()(hidden)


def scan(
    model: nn.Module, calibration: Calibration, chunk: list[Target], sparsity: float,
    prefix_reuse: bool = True,
) -> tuple[float, list[TargetScore], dict[str, float]]:  # fmt: skip
    """(base metric, a score per target, timing) for the targets of one chunk."""
    started = time.perf_counter()
    device = next(model.parameters()).device
    kind = calibration.kind
    cache = PrefixCache(model, calibration, {t.layer for t in chunk}) if prefix_reuse else None
    if cache is None:
        base = _full_metric(model, calibration, device)
    else:
        base = calibration.metric(cache.base_contributions)
    results = []
    for target in tqdm(chunk, desc="sensitivity", unit="target"):
        with pruned(target, sparsity) as zeroed:
            if cache is not None:
                contributions = [
                    calibration.contribution(i, cache.suffix_logits(target.layer, i))
                    for i in range(len(calibration.batches))
                ]
                metric = calibration.metric(contributions)
            else:
                metric = _full_metric(model, calibration, device)
        results.append(
            TargetScore(target.name, target.layer, metric, orient(kind, metric, base), zeroed)
        )
    wall = time.perf_counter() - started
    return base, results, {"wall_time_s": wall, "tokens": calibration.tokens * (len(chunk) + 1)}


@torch.inference_mode()
def _full_metric(model: nn.Module, calibration: Calibration, device: torch.device) -> float:
    contributions = [
        calibration.contribution(i, model(batch.to(device), use_cache=False).logits)
        for i, batch in enumerate(calibration.batches)
    ]
    return calibration.metric(contributions)
