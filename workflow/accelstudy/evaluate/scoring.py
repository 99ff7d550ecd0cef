"""Continuation log-likelihoods: `score_shared_contexts` scores each from its context's KV cache,
as the references that run each in full do (`score_separately`, `score_padded_batch`)."""

import inspect
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Score:
    """Sum of continuation-token log-probs, their count, and whether greedy decoding agrees."""

    loglikelihood: float
    n_tokens: int
    is_greedy: bool


def _score(logprobs: torch.Tensor, targets: list[int]) -> Score:
    """logprobs: (len(targets), vocab) rows predicting each target token."""
    if not targets:  # every token of it was truncated away
        return Score(0.0, 0, False)
    index = torch.tensor(targets, device=logprobs.device)
    picked = logprobs.gather(1, index[:, None]).squeeze(1)
    greedy = bool((logprobs.argmax(-1) == index).all())
    return Score(float(picked.double().sum()), len(targets), greedy)


@cache
def _cache_argument(model_class: type) -> str:
    """transformers 5 calls the KV cache `cache`; 4.x (the Gaudi stack) `past_key_values`."""
    parameters = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def pad_right(rows: list[list[int]], device: torch.device | None = None) -> torch.Tensor:
    """Rows of token ids (or mask bits) right-padded with 0 to the longest, as one tensor."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], device=device)


Item = tuple[list[int], list[list[int]]]  # (context tokens, each continuation's tokens)


@torch.inference_mode()
def score_shared_contexts(model: nn.Module, items: list[Item]) -> list[list[Score]]:
    """Score every item's continuations, each context run once, several items per batch: the
    contexts run as one right-padded batch (only their last hidden states through the LM head); the
    continuations but their last token run on top of each item's repeated cache rows, positions
    continuing each context, the mask hiding context padding (their own is on the right: unseen)."""
    device = next(model.parameters()).device
    contexts = [context for context, _ in items]
    lengths = torch.tensor([len(c) for c in contexts], device=device)
    ctx_mask = pad_right([[1] * len(c) for c in contexts], device)
    out = model.get_decoder()(pad_right(contexts, device), attention_mask=ctx_mask, use_cache=True)
    last = out.last_hidden_state[torch.arange(len(items), device=device), lengths - 1]
    first = F.log_softmax(model.get_output_embeddings()(last).float(), dim=-1)

    owners = [i for i, (_, conts) in enumerate(items) for _ in conts]
    continuations = [cont for _, conts in items for cont in conts]
    rest = None
    if max(len(c) for c in continuations) > 1:
        argument = _cache_argument(type(model))
        kv = getattr(out, argument)
        kv.batch_select_indices(torch.tensor(owners, device=device))
        inputs = pad_right([c[:-1] for c in continuations], device)
        mask = torch.cat([ctx_mask[owners], torch.ones_like(inputs)], dim=1)
        positions = lengths[owners][:, None] + torch.arange(inputs.shape[1], device=device)[None]
        cache = {"use_cache": True, argument: kv}
        logits = model(inputs, attention_mask=mask, position_ids=positions, **cache).logits
        rest = F.log_softmax(logits.float(), dim=-1)

    scores: list[list[Score]] = [[] for _ in items]
    for row, (owner, cont) in enumerate(zip(owners, continuations, strict=True)):
        rows = first[owner][None]
        if len(cont) > 1:
            rows = torch.cat([rows, rest[row, : len(cont) - 1]], dim=0)
        scores[owner].append(_score(rows, cont))
    return scores


def score_shared_context(model: nn.Module, ctx: list[int], conts: list[list[int]]) -> list[Score]:
    """One item: the context runs once; every continuation is scored from its KV cache."""
    return score_shared_contexts(model, [(ctx, conts)])[0]


def score_separately(model: nn.Module, context: list[int], conts: list[list[int]]) -> list[Score]:
    """Reference: one full forward pass per (context + continuation)."""
    return [score_padded_batch(model, context, [c])[0] for c in conts]


@torch.inference_mode()
def score_padded_batch(model: nn.Module, context: list[int], conts: list[list[int]]) -> list[Score]:
    """Every (context + continuation) in full, as one right-padded batch."""
    device = next(model.parameters()).device
    logits = model(pad_right([(context + c)[:-1] for c in conts], device)).logits
    logprobs = F.log_softmax(logits.float(), dim=-1)
    start = len(context) - 1
    return [_score(logprobs[i, start : start + len(c)], c) for i, c in enumerate(conts)]
