"""Multiple-choice accuracy (HellaSwag, BoolQ) with shared-context scoring."""

from __future__ import annotations

from collections.abc import Callable
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
    tokenizer: PreTrainedTokenizerBase, request: ChoiceRequest, prepend_bos: bool
) -> tuple[list[int], list[list[int]]]:
    """Context tokens and each continuation's tokens (lm-eval's split of the whole string)."""
    pairs = [encode_pair(tokenizer, request.context, c, prepend_bos) for c in request.continuations]
    return pairs[0][0], [cont for _, cont in pairs]


def score_request(
    model: torch.nn.Module,
    context: list[int],
    continuations: list[list[int]],
    max_length: int,
    score: Callable[[torch.nn.Module, list[int], list[list[int]]], list[Score]],
) -> list[Score]:
    """Score with a shared context when everything fits in `max_length`.

    Otherwise each continuation keeps the last `max_length + 1` tokens of its own
    (context + continuation), as lm-eval truncates, so the contexts differ and are scored
    one by one.
    """
    if all(len(context) + len(c) - 1 <= max_length for c in continuations):
        return score(model, context, continuations)
    scores = []
    for cont in continuations:
        whole = (context + cont)[-(max_length + 1) :]
        scores.extend(score(model, whole[: len(whole) - len(cont)], [cont]))
    return scores


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
        context, continuations = tokenize_request(tokenizer, request, spec.prepend_bos)
        scores = score_request(model, context, continuations, max_length, score)
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
