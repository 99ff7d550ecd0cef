"""Log-likelihood of continuations given a context, the core of multiple-choice scoring.

`score_shared_context` runs the context once and scores every continuation from its KV
cache; `score_separately` runs each (context + continuation) in full, one pass each, and
`score_padded_batch` runs them in full as one padded batch. All return the same numbers;
the first does a fraction of the work (bench/multiple_choice.py measures it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Score:
    """Sum of continuation-token log-probs, their count, and whether greedy decoding agrees."""

    loglikelihood: float
    n_tokens: int
    is_greedy: bool


def _gather(logprobs: torch.Tensor, targets: list[int]) -> tuple[float, bool]:
    """logprobs: (len(targets), vocab) rows predicting each target token."""
    index = torch.tensor(targets, device=logprobs.device)
    picked = logprobs.gather(1, index[:, None]).squeeze(1)
    greedy = bool((logprobs.argmax(-1) == index).all())
    return float(picked.double().sum()), greedy


@cache
def _cache_argument(model_class: type) -> str:
    """transformers 5 calls the KV cache `cache`; 4.x (the Gaudi stack) `past_key_values`."""
    parameters = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _pad(rows: list[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], device=device)


@torch.inference_mode()
def score_shared_context(
    model: torch.nn.Module, context: list[int], continuations: list[list[int]]
) -> list[Score]:
    """Score continuations after one pass over the shared context.

    Right padding needs no attention mask: under a causal mask no real token attends to a
    pad that comes after it, and logits at pad positions are ignored.
    """
    device = next(model.parameters()).device
    out = model(torch.tensor([context], device=device), use_cache=True, logits_to_keep=1)
    first = F.log_softmax(out.logits[0, -1].float(), dim=-1)
    rest_len = max(len(c) for c in continuations) - 1
    rest = None
    if rest_len > 0:
        argument = _cache_argument(type(model))
        kv = getattr(out, argument)
        kv.batch_repeat_interleave(len(continuations))
        inputs = _pad([c[:-1] for c in continuations], 0, device)
        logits = model(inputs, use_cache=True, **{argument: kv}).logits
        rest = F.log_softmax(logits.float(), dim=-1)
    scores = []
    for i, cont in enumerate(continuations):
        rows = first[None]
        if len(cont) > 1:
            rows = torch.cat([rows, rest[i, : len(cont) - 1]], dim=0)
        ll, greedy = _gather(rows, cont)
        scores.append(Score(ll, len(cont), greedy))
    return scores


@torch.inference_mode()
def score_separately(
    model: torch.nn.Module, context: list[int], continuations: list[list[int]]
) -> list[Score]:
    """Reference: one full forward pass per (context + continuation)."""
    return [score_padded_batch(model, context, [c])[0] for c in continuations]


@torch.inference_mode()
def score_padded_batch(
    model: torch.nn.Module, context: list[int], continuations: list[list[int]]
) -> list[Score]:
    """Every (context + continuation) in full, as one right-padded batch."""
    device = next(model.parameters()).device
    sequences = [(context + c)[:-1] for c in continuations]
    logits = model(_pad(sequences, 0, device)).logits
    logprobs = F.log_softmax(logits.float(), dim=-1)
    scores = []
    for i, cont in enumerate(continuations):
        start = len(context) - 1
        ll, greedy = _gather(logprobs[i, start : start + len(cont)], cont)
        scores.append(Score(ll, len(cont), greedy))
    return scores
