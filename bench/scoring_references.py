"""What the tests and benches hold the packed scoring to: every (context + continuation) in full."""

import torch
import torch.nn.functional as F
from accelstudy.evaluate.multiple_choice import Score, _score, pad_right, score_shared_contexts
from torch import nn


def score_shared_context(model: nn.Module, ctx: list[int], conts: list[list[int]]) -> list[Score]:
    """One item: the context runs once, its continuations packed after it."""
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
