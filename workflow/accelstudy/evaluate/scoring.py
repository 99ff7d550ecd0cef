"""Continuation log-likelihoods: `score_shared_contexts` runs each context once, its continuations
packed after it (tests/scoring_references.py holds it to scoring each in full)."""

from dataclasses import dataclass

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


def pad_right(rows: list[list[int]], device: torch.device | None = None) -> torch.Tensor:
    """Rows of token ids (or mask bits) right-padded with 0 to the longest, as one tensor."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], device=device)


Item = tuple[list[int], list[list[int]]]  # (context tokens, each continuation's tokens)


def _packed_rows(items: list[Item]) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """Per item one row: its context, then each continuation but its last token (the last is only
    a target); each token's position (every continuation continues the context) and segment (0 the
    context, k the k-th continuation)."""
    ids, positions, segments = [], [], []
    for context, continuations in items:
        row, pos, seg = list(context), list(range(len(context))), [0] * len(context)
        for k, cont in enumerate(continuations, start=1):
            row += cont[:-1]
            pos += range(len(context), len(context) + len(cont) - 1)
            seg += [k] * (len(cont) - 1)
        ids.append(row)
        positions.append(pos)
        segments.append(seg)
    return ids, positions, segments


def _tree_mask(segments: list[list[int]], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive (rows, 1, width, width) mask: a token sees earlier tokens of the context and of its
    own segment; padding sees only itself (so no row is empty), and nothing sees padding."""
    width = max(len(s) for s in segments)
    seg = torch.tensor([s + [-1] * (width - len(s)) for s in segments], device=device)
    index = torch.arange(width, device=device)
    causal = index[:, None] >= index[None, :]
    visible = (seg[:, None, :] == 0) | (seg[:, None, :] == seg[:, :, None])
    allowed = (causal & visible & (seg[:, None, :] >= 0)) | torch.eye(
        width, dtype=torch.bool, device=device
    )
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


@torch.inference_mode()
def score_shared_contexts(model: nn.Module, items: list[Item]) -> list[list[Score]]:
    """Score every item's continuations in one forward pass, one row per item (`_packed_rows`):
    each context runs once, every continuation beside it at once (no KV cache to repeat), and the
    LM head sees only the positions that predict a continuation token."""
    device = next(model.parameters()).device
    ids, positions, segments = _packed_rows(items)
    dtype = model.get_input_embeddings().weight.dtype
    if any(max(s) > 0 for s in segments):
        mask = _tree_mask(segments, dtype if dtype.is_floating_point else torch.float32, device)
        forward = {"attention_mask": mask, "position_ids": pad_right(positions, device)}
    else:  # contexts only (one-token continuations): the plain causal path, padding masked
        forward = {"attention_mask": pad_right([[1] * len(row) for row in ids], device)}
    hidden = model.get_decoder()(pad_right(ids, device), **forward).last_hidden_state
    rows, columns, spans = [], [], []  # the positions predicting each continuation's tokens
    for row, (context, continuations) in enumerate(items):
        offset = len(context)
        for cont in continuations:
            spans.append((len(rows), len(cont)))
            rows += [row] * len(cont)
            columns += [len(context) - 1, *range(offset, offset + len(cont) - 1)][: len(cont)]
            offset += max(len(cont) - 1, 0)
    index = (
        torch.tensor(rows, dtype=torch.long, device=device),
        torch.tensor(columns, dtype=torch.long, device=device),
    )
    logprobs = F.log_softmax(model.get_output_embeddings()(hidden[index]).float(), dim=-1)
    flat = [cont for _, continuations in items for cont in continuations]
    scores = iter(
        _score(logprobs[s : s + n], cont) for (s, n), cont in zip(spans, flat, strict=True)
    )
    return [[next(scores) for _ in continuations] for _, continuations in items]
