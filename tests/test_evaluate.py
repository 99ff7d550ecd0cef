"""Scoring and metrics on a tiny random Llama: exact equalities and hand-checked values."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch
from accelstudy.evaluate import evaluate_task
from accelstudy.evaluate.multiple_choice import (
    FORWARD_TOKENS,
    decide,
    least_padding,
    score_items,
    tokenize_request,
)
from accelstudy.evaluate.perplexity import documents, paper_blocks
from accelstudy.evaluate.prompts import (
    boolq_paper,
    encode,
    encode_pair,
    hellaswag_clean,
)
from accelstudy.tasks import TASKS
from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

from bench.scoring_references import (
    Score,
    score_padded_batch,
    score_separately,
    score_shared_context,
    score_shared_contexts,
)
from tests.conftest import EVAL_SETTINGS

CHOICE_TASKS = sorted((task, p) for task, spec in TASKS.items() for p in spec.protocols)


@pytest.mark.parametrize(("task", "protocol"), CHOICE_TASKS)
def test_shared_context_equals_separate_scoring(task, protocol, tiny, standin):
    model, tokenizer = tiny
    spec = TASKS[task].protocols[protocol]
    for row in standin[task][:8]:
        context, conts = tokenize_request(tokenizer, spec.request(row), spec, 2048)
        shared = score_shared_context(model, context, conts)
        separate = score_separately(model, context, conts)
        padded = score_padded_batch(model, context, conts)
        for a, b, c in zip(shared, separate, padded, strict=True):
            assert a.n_tokens == b.n_tokens == c.n_tokens
            assert a.loglikelihood == pytest.approx(b.loglikelihood, abs=1e-4)
            assert c.loglikelihood == pytest.approx(b.loglikelihood, abs=1e-4)
            assert a.is_greedy == b.is_greedy


@pytest.mark.parametrize("task", ["hellaswag", "boolq"])
def test_batched_shared_contexts_equal_separate_scoring(task, tiny, standin):
    """Items of different context lengths in one batch: padding must not leak into scores."""
    model, tokenizer = tiny
    spec = TASKS[task].protocols["paper"]
    items = [tokenize_request(tokenizer, spec.request(r), spec, 2048) for r in standin[task][:6]]
    items.append(([tokenizer.bos_token_id], items[0][1]))  # a one-token context
    assert len({len(c) for c, _ in items}) > 2
    batched = score_shared_contexts(model, items)
    for (context, conts), scores in zip(items, batched, strict=True):
        expected = score_separately(model, context, conts)
        assert [s.loglikelihood for s in scores] == pytest.approx(
            [s.loglikelihood for s in expected], abs=1e-4
        )


def test_long_items_are_truncated_like_lm_eval(tiny):
    model, _ = tiny
    context, conts = list(range(5, 45)), [[7, 8, 9], [10]]
    [scores] = score_items(model, [(context, conts)], max_length=16)
    for cont, score in zip(conts, scores, strict=True):
        whole = (context + cont)[-17:]
        [expected] = score_separately(model, whole[: len(whole) - len(cont)], [cont])
        assert score.loglikelihood == pytest.approx(expected.loglikelihood, abs=1e-5)


def test_score_is_sum_of_token_logprobs(tiny):
    model, _ = tiny
    context, cont = [1, 5, 9, 14], [20, 30, 40]
    [score] = score_shared_context(model, context, [cont])
    with torch.inference_mode():
        logits = model(torch.tensor([context + cont])).logits[0]
    logprobs = torch.log_softmax(logits, -1)
    expected = sum(float(logprobs[len(context) - 1 + j, t]) for j, t in enumerate(cont))
    assert score.loglikelihood == pytest.approx(expected, abs=1e-5)


def test_paper_perplexity_matches_hf_loss(tiny, standin):
    model, tokenizer = tiny
    blocks = paper_blocks(tokenizer, standin["wikitext"], 64, limit=6)
    assert blocks.shape == (6, 64)
    with torch.inference_mode():
        losses = [float(model(b[None], labels=b[None]).loss) for b in blocks]
    expected = math.exp(np.mean(losses))  # equal token counts per block -> plain mean
    from accelstudy.device import resolve

    metrics, _ = evaluate_task(
        model, tokenizer, "wikitext", "paper", standin["wikitext"], EVAL_SETTINGS, resolve("cpu"), 6
    )
    assert metrics["blocks"] == 6
    assert metrics["perplexity"] == pytest.approx(expected, rel=1e-5)
    assert metrics["tokens"] == 6 * 64
    assert metrics["tokens_per_s"] > 0 and metrics["peak_memory_bytes"] > 0


def test_lm_eval_rolling_perplexity_counts_every_token_once(tiny, cpu, standin):
    model, tokenizer = tiny
    metrics, _ = evaluate_task(
        model, tokenizer, "wikitext", "lm-eval", standin["wikitext"], EVAL_SETTINGS, cpu, 3
    )
    docs = documents(standin["wikitext"])[:3]
    n_tokens = sum(len(encode(tokenizer, wikitext_detokenizer({"page": d}))) for d in docs)
    assert metrics["documents"] == 3
    assert metrics["target_tokens"] == n_tokens  # each token is a target exactly once
    assert metrics["tokens"] >= n_tokens  # windows re-read earlier tokens as context
    n_bytes = sum(len(d.encode()) for d in docs)
    assert metrics["bits_per_byte"] == pytest.approx(
        math.log2(metrics["byte_perplexity"]), rel=1e-9
    )
    words = sum(len(re.split(r"\s+", d)) for d in docs)
    assert metrics["word_perplexity"] == pytest.approx(
        metrics["byte_perplexity"] ** (n_bytes / words), rel=1e-6
    )


def test_documents_split_at_top_level_headings():
    rows = [
        {"text": ""},
        {"text": " = A = \n"},
        {"text": ""},
        {"text": " a1 \n"},
        {"text": " = = Sub = = \n"},
        {"text": " = B = \n"},
    ]
    assert documents(rows) == [" = A = \n \n a1 \n = = Sub = = ", " = B = \n"]


def test_boolq_paper_records_both_tie_rules():
    spec = TASKS["boolq"].protocols["paper"]
    request = boolq_paper({"passage": "p", "question": "q", "answer": True})
    tie = [Score(-2.0, 1, False), Score(-2.0, 1, False)]
    result = decide(request, tie, spec)
    assert request.choices[result.prediction] == "no"  # the Gaudi scripts: yes only if yes > no
    assert result.predictions == {"acc_ties_no": 1, "acc_ties_yes": 0}
    truncated = [Score(0.0, 0, False), Score(0.0, 0, False)]  # both answers cut off: -inf
    assert decide(request, truncated, spec).predictions == {"acc_ties_no": 1, "acc_ties_yes": 0}


def test_token_normalisation_and_char_normalisation_differ():
    request = (
        TASKS["hellaswag"]
        .protocols["lm-eval"]
        .request(
            {
                "activity_label": "x",
                "ctx_a": "a",
                "ctx_b": "b",
                "endings": ["aaaaaaaa", "b", "c", "d"],
                "label": "0",
            }
        )
    )
    scores = [
        Score(-4.0, 4, False),
        Score(-3.0, 1, False),
        Score(-5.0, 1, False),
        Score(-6.0, 1, False),
    ]
    result = decide(request, scores, TASKS["hellaswag"].protocols["lm-eval"])
    assert result.prediction == 1  # highest sum
    assert result.prediction_norm == 0  # -4/8 beats -3/1 per character


def test_encode_pair_moves_trailing_space(tiny):
    _, tokenizer = tiny
    context, cont = encode_pair(tokenizer, "Answer: ", "yes")
    assert tokenizer.decode(context) == "Answer:"
    assert tokenizer.decode(cont) == " yes"


def test_hellaswag_cleaning():
    assert hellaswag_clean(" How to [title] cook  rice [step] now ") == "How to. cook rice now"


def test_multiple_choice_accuracy_from_items(tiny, cpu, standin):
    model, tokenizer = tiny
    metrics, items = evaluate_task(
        model, tokenizer, "hellaswag", "paper", standin["hellaswag"], EVAL_SETTINGS, cpu, 10
    )
    assert metrics["items"] == len(items) == 10
    correct = sum(i["prediction"] == i["gold"] for i in items)
    assert metrics["accuracy"] == correct / 10
    for item in items:
        normalised = np.array(item["loglikelihoods"]) / np.array(item["n_tokens"])
        assert item["prediction"] == int(np.argmax(normalised))


@pytest.mark.parametrize("task", ["hellaswag", "boolq"])
def test_scores_do_not_depend_on_the_batch_size(task, tiny, standin):
    """1, 8 or 32 items per packed batch (and a truncated item among them): the same scores."""
    model, tokenizer = tiny
    spec = TASKS[task].protocols["lm-eval"]
    items = [tokenize_request(tokenizer, spec.request(r), spec, 2048) for r in standin[task][:40]]
    max_length = max(len(c) for c, _ in items) - 3  # the longest items are truncated
    runs = {n: score_items(model, items, max_length, items_per_batch=n) for n in (1, 8, 32)}
    lls = {n: [s.loglikelihood for item in run for s in item] for n, run in runs.items()}
    assert lls[8] == pytest.approx(lls[1], rel=1e-5, abs=1e-6)
    assert lls[32] == pytest.approx(lls[1], rel=1e-5, abs=1e-6)
    for n in (8, 32):
        assert [[s.n_tokens for s in i] for i in runs[n]] == [
            [s.n_tokens for s in i] for i in runs[1]
        ]


def test_batches_are_cut_where_every_arrangement_costs_no_less() -> None:
    """least_padding's cuts against every way to cut the rows into runs of at most `most`."""
    rng = np.random.default_rng(3)

    def cost(cuts: list[int], lengths: list[int]) -> int:
        runs = itertools.pairwise(cuts)
        return sum((end - start) * lengths[end - 1] + FORWARD_TOKENS for start, end in runs)

    for _ in range(40):
        n, most = int(rng.integers(1, 10)), int(rng.integers(1, 5))
        lengths = sorted(int(x) for x in rng.integers(5, 200, size=n))
        cuts = least_padding(lengths, most)
        assert cuts[0] == 0 and cuts[-1] == n
        assert all(0 < end - start <= most for start, end in itertools.pairwise(cuts))
        inner = [
            [0, *(i for i, bit in enumerate(f"{mask:0{n - 1}b}", 1) if bit == "1"), n]
            for mask in range(2 ** (n - 1))
        ]
        allowed = [c for c in inner if all(b - a <= most for a, b in itertools.pairwise(c))]
        assert cost(cuts, lengths) == min(cost(c, lengths) for c in allowed)
