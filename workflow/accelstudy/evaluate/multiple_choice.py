"""Multiple-choice accuracy (HellaSwag, BoolQ): each context runs once, its continuations packed
after it (`score_shared_contexts`; bench/scoring_references.py holds it to scoring each in full)."""

import itertools
from dataclasses import asdict, dataclass
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import PreTrainedModel
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy.evaluate import Scoring
from accelstudy.evaluate.prompts import ChoiceRequest, encode_pair
from accelstudy.tasks import TASKS, ChoiceProtocol


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
    """One pass, a row per item (`_packed_rows`): each context runs once, its continuations beside
    it (no KV cache to repeat); the LM head runs only where a continuation token is predicted."""
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


@dataclass
class ItemResult:
    gold: int
    loglikelihoods: list[float]
    n_tokens: list[int]
    prediction: int  # under the protocol's first tie rule
    predictions: dict[str, int]  # under each of its tie rules
    prediction_norm: int | None


def tokenize_request(
    tokenizer: Tokenizer, request: ChoiceRequest, spec: ChoiceProtocol, max_length: int | None
) -> Item:
    """Context and continuation tokens (lm-eval's split), `fit` to `max_length` (None: whole)."""
    pairs = [encode_pair(tokenizer, request.context, " " + c, spec.name) for c in request.choices]
    return fit((pairs[0][0], [cont for _, cont in pairs]), spec, max_length)


def fit(item: Item, spec: ChoiceProtocol, max_length: int | None) -> Item:
    """Right truncation (the authors' scripts) keeps a text's first `max_length` tokens, a choice
    maybe none (-inf); left is in score_items."""
    context, continuations = item
    if spec.truncation != "right" or max_length is None:
        return item
    room = max(max_length - len(context), 0)
    return context[:max_length], [c[:room] for c in continuations]


FORWARD_TOKENS = 32  # a forward call's fixed cost in tokens' worth (SmolLM2-135M, 2-core CPU)


def least_padding(lengths: list[int], most: int) -> list[int]:
    """Where to cut ascending row lengths into batches of at most `most` rows: the cuts that
    compute the fewest tokens, padding included, a call costing FORWARD_TOKENS more (runs of
    eight padded a tenth of HellaSwag's and a seventh of BoolQ's tokens). Dynamic programming."""
    cost, cut = [0] + [0] * len(lengths), [0] * (len(lengths) + 1)
    for end in range(1, len(lengths) + 1):  # a batch ending at `end` pads to lengths[end - 1]
        options = (
            (cost[s] + (end - s) * lengths[end - 1], s) for s in range(max(0, end - most), end)
        )
        cost[end], cut[end] = min(options)
        cost[end] += FORWARD_TOKENS
    cuts = [len(lengths)]
    while cuts[-1]:
        cuts.append(cut[cuts[-1]])
    return cuts[::-1]


def score_items(
    model: PreTrainedModel,
    tokenized: list[Item],
    max_length: int,
    desc: str = "items",
    items_per_batch: int = 8,
) -> list[list[Score]]:
    """Every item's scores (batching similar lengths changes none); one over `max_length` as
    lm-eval truncates: each choice keeps the last max_length + 1 of context + choice, alone."""
    units: list[tuple[int, Item]] = []  # (item, what one packed row scores)
    for i, (context, conts) in enumerate(tokenized):
        if all(len(context) + len(c) - 1 <= max_length for c in conts):
            units.append((i, (context, conts)))
            continue
        for cont in conts:
            whole = (context + cont)[-(max_length + 1) :]
            units.append((i, (whole[: len(whole) - len(cont)], [cont])))
    order = sorted(range(len(units)), key=lambda u: packed_length(units[u][1]))
    cuts = least_padding([packed_length(units[u][1]) for u in order], items_per_batch)
    done: dict[int, list[Score]] = {}
    for start, end in tqdm(itertools.pairwise(cuts), desc=desc, unit="batch", mininterval=5):
        chunk = order[start:end]
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
    """Accuracy of the first `limit` items; lm-eval's protocol adds acc_norm (per character)."""
    task, protocol, settings = scoring.task, scoring.protocol, scoring.settings
    spec = TASKS[task].protocols[protocol]
    max_length = settings[f"{task}_max_length" if protocol == "paper" else "lm_eval_max_length"]
    requests = [spec.request(row) for row in scoring.rows[: scoring.limit or None]]
    whole = [tokenize_request(scoring.tokenizer, r, spec, None) for r in requests]
    # lm-eval's left truncation keeps max_length + 1 tokens (the last is only a target)
    room = max_length + (spec.truncation != "right")
    truncated = sum(any(len(c) + len(cont) > room for cont in conts) for c, conts in whole)
    tokenized = [fit(item, spec, max_length) for item in whole]
    scores = score_items(scoring.model, tokenized, max_length, f"{task}/{protocol}")
    head_tokens = sum(len(c) for _, conts in tokenized for c in conts)
    scoring.meter.ran(map(packed_length, tokenized), head_tokens=head_tokens)
    items = [decide(r, item_scores, spec) for r, item_scores in zip(requests, scores, strict=True)]
    gold = np.array([i.gold for i in items])
    chosen: dict[str, list[int | None]] = {"acc": [i.prediction for i in items]}
    # BoolQ paper: the same items under each of its tie rules
    chosen |= {n: [i.predictions[n] for i in items] for n in spec.ties if n != "acc"}
    if spec.normalisation == "none":
        chosen["acc_norm"] = [i.prediction_norm for i in items]
    chosen["accuracy"] = chosen[spec.quoted]
    correct = {name: np.array(picks) == gold for name, picks in chosen.items()}
    metrics = {"items": len(items), **{name: float(np.mean(c)) for name, c in correct.items()}}
    metrics["truncated_items"] = truncated  # scored on what the context left of them
    per_item = [{f"correct_{n}": bool(c[k]) for n, c in correct.items()} for k in range(len(items))]
    return metrics, [{"item": k, **asdict(i), **per_item[k]} for k, i in enumerate(items)]
