"""Multiple-choice accuracy (HellaSwag, BoolQ) with shared-context scoring."""

from dataclasses import asdict, dataclass

import numpy as np
from tqdm import tqdm
from transformers import PreTrainedModel
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy.evaluate import Scoring
from accelstudy.evaluate.prompts import CHOICE_PROTOCOLS, ChoiceProtocol, ChoiceRequest, encode_pair
from accelstudy.evaluate.scoring import Item, Score, packed_length, score_shared_contexts


@dataclass
class ItemResult:
    gold: int
    loglikelihoods: list[float]
    n_tokens: list[int]
    prediction: int  # under the protocol's first tie rule
    predictions: dict[str, int]  # under each of its tie rules
    prediction_norm: int | None


def tokenize_request(
    tokenizer: Tokenizer, request: ChoiceRequest, spec: ChoiceProtocol, max_length: int
) -> Item:
    """Context and continuation tokens (lm-eval's split). Right truncation (the authors' scripts)
    keeps a text's first `max_length` tokens, a choice maybe none (-inf); left is in score_items."""
    pairs = [encode_pair(tokenizer, request.context, " " + c, spec.name) for c in request.choices]
    context, continuations = pairs[0][0], [cont for _, cont in pairs]
    if spec.truncation == "right":
        room = max(max_length - len(context), 0)
        context, continuations = context[:max_length], [c[:room] for c in continuations]
    return context, continuations


def score_items(
    model: PreTrainedModel,
    tokenized: list[Item],
    max_length: int,
    desc: str = "items",
    items_per_batch: int = 8,
) -> list[list[Score]]:
    """Every item's scores, items of similar length batched; one over `max_length` as lm-eval
    truncates it (each choice keeps the last max_length + 1 of its context + choice, scored on its
    own). Scores do not depend on the batching (tests: 1, 8, 32 items per batch)."""
    units: list[tuple[int, Item]] = []  # (item, what one packed row scores)
    for i, (context, conts) in enumerate(tokenized):
        if all(len(context) + len(c) - 1 <= max_length for c in conts):
            units.append((i, (context, conts)))
            continue
        for cont in conts:
            whole = (context + cont)[-(max_length + 1) :]
            units.append((i, (whole[: len(whole) - len(cont)], [cont])))
    order = sorted(range(len(units)), key=lambda u: packed_length(units[u][1]))
    done: dict[int, list[Score]] = {}
    batches = range(0, len(order), items_per_batch)
    for start in tqdm(batches, desc=desc, unit="batch", mininterval=5):
        chunk = order[start : start + items_per_batch]
        scored = score_shared_contexts(model, [units[u][1] for u in chunk])
        done.update(zip(chunk, scored, strict=True))
    scores: list[list[Score]] = [[] for _ in tokenized]
    for u, (i, _) in enumerate(units):
        scores[i] += done[u]
    return scores


def _argmax(values: np.ndarray, tie_break: int | None) -> int:
    best = np.flatnonzero(values == values.max())
    return int(tie_break) if tie_break is not None and tie_break in best else int(best[0])


def decide(request: ChoiceRequest, scores: list[Score], protocol: ChoiceProtocol) -> ItemResult:
    """The chosen index under each tie rule; a choice with no tokens left scores -inf."""
    lls = np.array([s.loglikelihood for s in scores])
    n_tokens = np.array([s.n_tokens for s in scores])
    values, norm = lls, None
    if protocol.normalisation == "token":
        values = np.where(n_tokens > 0, lls / np.maximum(n_tokens, 1), -np.inf)
    else:
        norm = _argmax(lls / np.array([float(len(c)) for c in request.choices]), None)
    predictions = {name: _argmax(values, tie) for name, tie in protocol.ties.items()}
    first = next(iter(predictions.values()))
    return ItemResult(request.gold, lls.tolist(), n_tokens.tolist(), first, predictions, norm)


def score(scoring: Scoring) -> tuple[dict[str, float], list[dict]]:
    """Accuracy on the first `limit` items, each protocol at its own maximum length; also acc_norm
    (character-normalised) under lm-eval's protocol."""
    model, tokenizer = scoring.model, scoring.tokenizer
    task, protocol, rows = scoring.task, scoring.protocol, scoring.rows
    settings, meter, limit = scoring.settings, scoring.meter, scoring.limit
    spec = CHOICE_PROTOCOLS[(task, protocol)]
    max_length = settings[f"{task}_max_length" if protocol == "paper" else "lm_eval_max_length"]
    requests = [spec.build(row) for row in rows[: limit or None]]
    tokenized = [tokenize_request(tokenizer, r, spec, max_length) for r in requests]
    scores = score_items(model, tokenized, max_length, f"{task}/{protocol}")
    head_tokens = sum(len(c) for _, conts in tokenized for c in conts)
    meter.ran(map(packed_length, tokenized), head_tokens=head_tokens)
    items = [decide(r, item_scores, spec) for r, item_scores in zip(requests, scores, strict=True)]
    gold = np.array([i.gold for i in items])

    def share(predictions: list[int | None]) -> float:
        return float(np.mean(np.array(predictions) == gold))

    metrics = {"items": len(items), "acc": share([i.prediction for i in items])}
    # BoolQ paper: the same items under each of its tie rules
    metrics |= {n: share([i.predictions[n] for i in items]) for n in spec.ties if n != "acc"}
    if spec.normalisation == "none":
        metrics["acc_norm"] = share([i.prediction_norm for i in items])
    metrics["accuracy"] = metrics[spec.quoted]
    return metrics, [asdict(i) for i in items]
