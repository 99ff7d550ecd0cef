"""Multiple-choice accuracy (HellaSwag, BoolQ) with shared-context scoring."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from accelstudy.evaluate.meters import Meter
from accelstudy.evaluate.prompts import CHOICE_PROTOCOLS, ChoiceRequest
from accelstudy.evaluate.scoring import Score, score_separately, score_shared_context
from accelstudy.evaluate.tokens import encode_pair


@dataclass
class ItemResult:
    gold: int
    loglikelihoods: list[float]
    n_tokens: list[int]
    prediction: int
    prediction_norm: int | None


def tokenize_request(
    tokenizer: PreTrainedTokenizerBase, request: ChoiceRequest, prepend_bos: bool, max_length: int
) -> tuple[list[int], list[list[int]]]:
    """Context tokens (left-truncated to fit `max_length`) and each continuation's tokens."""
    pairs = [encode_pair(tokenizer, request.context, c, prepend_bos) for c in request.continuations]
    context = pairs[0][0]
    continuations = [cont for _, cont in pairs]
    longest = max(len(c) for c in continuations)
    keep = max(1, max_length + 1 - longest)
    return context[-keep:], continuations


def _argmax(values: np.ndarray, tie_break: int | None) -> int:
    best = np.flatnonzero(values == values.max())
    if tie_break is not None and len(best) > 1 and tie_break in best:
        return int(tie_break)
    return int(best[0])


def decide(request: ChoiceRequest, scores: list[Score], normalisation: str) -> ItemResult:
    lls = np.array([s.loglikelihood for s in scores])
    n_tokens = [s.n_tokens for s in scores]
    if normalisation == "token":
        prediction = _argmax(lls / np.array(n_tokens), request.tie_break)
        prediction_norm = None
    else:
        prediction = _argmax(lls, request.tie_break)
        chars = np.array([float(len(c)) for c in request.choices])
        prediction_norm = _argmax(lls / chars, request.tie_break)
    return ItemResult(request.gold, lls.tolist(), n_tokens, prediction, prediction_norm)


def evaluate_multiple_choice(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    task: str,
    protocol: str,
    rows: list[dict],
    meter: Meter,
    max_length: int,
    shared_context: bool = True,
) -> tuple[dict[str, float], list[dict]]:
    """Accuracy over `rows`; also acc_norm (character-normalised) under lm-eval's protocol."""
    spec = CHOICE_PROTOCOLS[(task, protocol)]
    score = score_shared_context if shared_context else score_separately
    items: list[ItemResult] = []
    for row in tqdm(rows, desc=f"{task}/{protocol}", unit="item", mininterval=5):
        request = spec.build(row)
        context, continuations = tokenize_request(tokenizer, request, spec.prepend_bos, max_length)
        scores = score(model, context, continuations)
        meter.add(len(context) + sum(len(c) - 1 for c in continuations))
        items.append(decide(request, scores, spec.normalisation))
    gold = np.array([i.gold for i in items])
    acc = float(np.mean(np.array([i.prediction for i in items]) == gold))
    metrics = {"items": len(items), "acc": acc}
    if spec.normalisation == "token":
        metrics["accuracy"] = acc
    else:
        acc_norm = float(np.mean(np.array([i.prediction_norm for i in items]) == gold))
        metrics["acc_norm"] = acc_norm
        # the number lm-eval users quote: acc_norm for HellaSwag, acc for BoolQ
        metrics["accuracy"] = acc_norm if task == "hellaswag" else acc
    return metrics, [asdict(i) for i in items]
