"""Multiple-choice accuracy (HellaSwag, BoolQ) with shared-context scoring."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from accelstudy.evaluate.meters import Meter
from accelstudy.evaluate.prompts import CHOICE_PROTOCOLS, ChoiceProtocol, ChoiceRequest
from accelstudy.evaluate.scoring import (
    Item,
    Score,
    score_separately,
    score_shared_context,
    score_shared_contexts,
)  # fmt: skip
from accelstudy.evaluate.tokens import encode_pair


@dataclass
class ItemResult:
    gold: int
    loglikelihoods: list[float]
    n_tokens: list[int]
    prediction: int  # under the protocol's first tie rule
    predictions: dict[str, int]  # under each of its tie rules
    prediction_norm: int | None


def tokenize_request(tokenizer: PreTrainedTokenizerBase, request: ChoiceRequest,
                     protocol: ChoiceProtocol, max_length: int) -> Item:  # fmt: skip
    """Context tokens and each continuation's tokens (lm-eval's split of the whole string).
    Right truncation (the authors' scripts) keeps each scored text's first `max_length` tokens,
    so a continuation may lose all of them (it then scores -inf); lm-eval's left truncation
    happens at scoring time (`score_items`)."""
    pairs = [encode_pair(tokenizer, request.context, c, protocol.name)
             for c in request.continuations]  # fmt: skip
    context, continuations = pairs[0][0], [cont for _, cont in pairs]
    if protocol.truncation == "right":
        room = max(max_length - len(context), 0)
        context, continuations = context[:max_length], [c[:room] for c in continuations]
    return context, continuations


ITEMS_PER_BATCH = 8


def _score_truncated(model: torch.nn.Module, context: list[int], continuations: list[list[int]],
                     max_length: int) -> list[Score]:  # fmt: skip
    """As lm-eval truncates: each continuation keeps the last `max_length + 1` tokens of its
    own (context + continuation), so the contexts differ and are scored one by one."""
    scores = []
    for cont in continuations:
        whole = (context + cont)[-(max_length + 1) :]
        scores.extend(score_shared_context(model, whole[: len(whole) - len(cont)], [cont]))
    return scores


def score_items(model: torch.nn.Module, tokenized: list[Item], max_length: int,
                shared_context: bool = True, desc: str = "items") -> list[list[Score]]:  # fmt: skip
    """Scores of every item, in order: those that fit by shared-context scoring in batches of
    similar context length, the rare one longer than `max_length` truncated per continuation."""
    scores: list[list[Score] | None] = [None] * len(tokenized)
    fits = [all(len(context) + len(c) - 1 <= max_length for c in conts)
            for context, conts in tokenized]  # fmt: skip
    fitting = sorted([i for i, ok in enumerate(fits) if ok], key=lambda i: len(tokenized[i][0]))
    for i in (j for j, ok in enumerate(fits) if not ok):
        scores[i] = _score_truncated(model, *tokenized[i], max_length)
    # Several items per batch pays when every continuation is one token (BoolQ: no second
    # pass). With endings of varied length, padding them to the longest in a many-item batch
    # costs more than the batching saves (bench/multiple_choice.py), so items go one by one.
    single_tokens = all(len(c) == 1 for _, conts in tokenized for c in conts)
    step = ITEMS_PER_BATCH if shared_context and single_tokens else 1
    for start in tqdm(range(0, len(fitting), step), desc=desc, unit="batch", mininterval=5):
        chunk = fitting[start : start + step]
        if shared_context:
            batch = score_shared_contexts(model, [tokenized[i] for i in chunk])
        else:
            batch = [score_separately(model, *tokenized[i]) for i in chunk]
        for i, item_scores in zip(chunk, batch, strict=True):
            scores[i] = item_scores
    return scores


def _argmax(values: np.ndarray, tie_break: int | None) -> int:
    best = np.flatnonzero(values == values.max())
    if tie_break is not None and len(best) > 1 and tie_break in best:
        return int(tie_break)
    return int(best[0])


def decide(request: ChoiceRequest, scores: list[Score], protocol: ChoiceProtocol) -> ItemResult:
    """The chosen index under each tie rule; a choice with no tokens left scores -inf."""
    lls = np.array([s.loglikelihood for s in scores])
    n_tokens = np.array([s.n_tokens for s in scores])
    prediction_norm = None
    if protocol.normalisation == "token":
        values = np.where(n_tokens > 0, lls / np.maximum(n_tokens, 1), -np.inf)
    else:
        values = lls
        chars = np.array([float(len(c)) for c in request.choices])
        prediction_norm = _argmax(lls / chars, None)
    predictions = {name: _argmax(values, tie) for name, tie in protocol.ties.items()}
    first = next(iter(predictions.values()))
    return ItemResult(
        request.gold, lls.tolist(), n_tokens.tolist(), first, predictions, prediction_norm
    )


def evaluate_multiple_choice(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: str, protocol: str,
    rows: list[dict], meter: Meter, max_length: int, shared_context: bool = True,
) -> tuple[dict[str, float], list[dict]]:  # fmt: skip
    """Accuracy over `rows`; also acc_norm (character-normalised) under lm-eval's protocol."""
    spec = CHOICE_PROTOCOLS[(task, protocol)]
    requests = [spec.build(row) for row in rows]
    tokenized = [tokenize_request(tokenizer, r, spec, max_length) for r in requests]
    scores = score_items(model, tokenized, max_length, shared_context, f"{task}/{protocol}")
    for context, continuations in tokenized:
        meter.add(len(context) + sum(max(len(c) - 1, 0) for c in continuations))
    items = [decide(r, item_scores, spec) for r, item_scores in zip(requests, scores, strict=True)]
    gold = np.array([i.gold for i in items])
    acc = float(np.mean(np.array([i.prediction for i in items]) == gold))
    metrics = {"items": len(items), "acc": acc}
    for name in spec.ties:
        if name != "acc":  # the same items under another tie rule (BoolQ paper)
            metrics[name] = float(np.mean(np.array([i.predictions[name] for i in items]) == gold))
    if spec.normalisation == "token":
        metrics["accuracy"] = acc
    else:
        acc_norm = float(np.mean(np.array([i.prediction_norm for i in items]) == gold))
        metrics["acc_norm"] = acc_norm
        # the number lm-eval users quote: acc_norm for HellaSwag, acc for BoolQ
        metrics["accuracy"] = acc_norm if task == "hellaswag" else acc
    return metrics, [asdict(i) for i in items]
