"""Continuation log-likelihoods: `score_shared_contexts` runs each context once, its continuations
packed after it (tests/scoring_references.py holds it to scoring each in full)."""

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel


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


def packed_length(item: Item) -> int:
    """Its packed row's length (`_packed_rows`)."""
    context, continuations = item
    return len(context) + sum(max(len(c) - 1, 0) for c in continuations)


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
    diagonal = torch.eye(width, dtype=torch.bool, device=device)
    allowed = (causal & visible & (seg[:, None, :] >= 0)) | diagonal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


@torch.inference_mode()
def score_shared_contexts(model: PreTrainedModel, items: list[Item]) -> list[list[Score]]:
    """Score every item's continuations in one forward pass, one row per item (`_packed_rows`):
    each context runs once, every continuation beside it at once (no KV cache to repeat), and the
    LM head sees only the positions that predict a continuation token."""
    device = next(model.parameters()).device
    ids, positions, segments = _packed_rows(items)
    # Module.__getattr__'s stub types a submodule's attribute as Tensor | Module
    dtype = cast(torch.Tensor, model.get_input_embeddings().weight).dtype
    forward: dict[str, torch.Tensor]
    if any(max(s) > 0 for s in segments):
        mask = _tree_mask(segments, dtype if dtype.is_floating_point else torch.float32, device)
        forward = {"attention_mask": mask, "position_ids": pad_right(positions, device)}
    else:  # contexts only (one-token continuations): the plain causal path, padding masked
        forward = {"attention_mask": pad_right([[1] * len(row) for row in ids], device)}
    hidden = model.get_decoder()(pad_right(ids, device), **forward).last_hidden_state
    rows: list[int] = []  # the (row, column) positions predicting each continuation's tokens
    columns: list[int] = []
    for row, (context, continuations) in enumerate(items):
        offset = len(context)
        for cont in continuations:
            rows += [row] * len(cont)
            columns += [len(context) - 1, *range(offset, offset + len(cont) - 1)][: len(cont)]
            offset += max(len(cont) - 1, 0)
    index = torch.tensor([rows, columns], dtype=torch.long, device=device)
    logprobs = F.log_softmax(model.get_output_embeddings()(hidden[index[0], index[1]]).float(), -1)
    chunks = iter(logprobs.split([len(c) for _, continuations in items for c in continuations]))
    return [[_score(next(chunks), c) for c in continuations] for _, continuations in items]
