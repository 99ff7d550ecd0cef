"""`protocol: paper` follows the authors' evaluation scripts (the paper's
evaluation protocol): default special tokens, raw HellaSwag ctx, right truncation, per-1,000-row
WikiText blocks, and both BoolQ tie rules."""

from __future__ import annotations

import pytest
from accelstudy.evaluate import evaluate_task
from accelstudy.evaluate.multiple_choice import tokenize_request
from accelstudy.evaluate.perplexity import paper_blocks
from accelstudy.tasks import TASKS

from tests.conftest import EVAL_SETTINGS

HELLASWAG = {
    "activity_label": "Cooking",
    "ctx_a": "A man pours rice into a pot.",
    "ctx_b": "he",
    "ctx": "A man pours rice into a pot. he",
    "endings": ["stirs it.", "sings.", "leaves the kitchen.", "adds water."],
    "label": "3",
}


@pytest.mark.parametrize("fixture", ["tiny", "tiny_bos"])
def test_special_tokens_as_the_tokenizer_adds_them(fixture, request, standin):
    _, tokenizer = request.getfixturevalue(fixture)
    adds_bos = fixture == "tiny_bos"
    rows = standin["wikitext"][:400]
    blocks = paper_blocks(tokenizer, rows, 64, None)
    # one BOS per row (empty rows too) with a Llama-like tokenizer, none without
    expected = sum(len(tokenizer(r["text"])["input_ids"]) for r in rows) // 64
    assert len(blocks) == expected
    n_bos = int((blocks == tokenizer.bos_token_id).sum())
    assert (n_bos > 0) == adds_bos
    spec = TASKS["boolq"].protocols["paper"]
    request_ = spec.request({"passage": "p", "question": "q", "answer": True})
    context, _ = tokenize_request(tokenizer, request_, spec, 512)
    assert (context[0] == tokenizer.bos_token_id) == adds_bos


def test_wikitext_blocks_never_span_a_1000_row_batch(tiny):
    _, tokenizer = tiny
    rows = [{"text": f" row {i} has some words in it \n"} for i in range(1500)]
    per_row = [tokenizer(r["text"])["input_ids"] for r in rows]
    first = [t for ids in per_row[:1000] for t in ids]
    second = [t for ids in per_row[1000:] for t in ids]
    blocks = paper_blocks(tokenizer, rows, 64, None)
    assert len(blocks) == len(first) // 64 + len(second) // 64
    # the second batch's first block starts at row 1000, not where the first batch's
    # leftover would have carried it
    assert blocks[len(first) // 64].tolist() == second[:64]
    everything = [t for ids in per_row for t in ids]
    assert len(first) % 64 and len(blocks) < len(everything) // 64 + 1
    assert blocks[len(first) // 64].tolist() != everything[len(first) // 64 * 64 :][:64]


def test_hellaswag_context_is_the_raw_ctx_field():
    paper = TASKS["hellaswag"].protocols["paper"].request(HELLASWAG)
    lm_eval = TASKS["hellaswag"].protocols["lm-eval"].request(HELLASWAG)
    assert paper.context == "A man pours rice into a pot. he"  # ctx_b stays lower case
    assert lm_eval.context == "Cooking: A man pours rice into a pot. He"
    without_ctx = {k: v for k, v in HELLASWAG.items() if k != "ctx"}
    rebuilt = TASKS["hellaswag"].protocols["paper"].request(without_ctx)
    assert rebuilt.context == paper.context  # ctx_a + " " + ctx_b, as the HF set builds it


def test_hellaswag_right_truncation_keeps_the_first_tokens(tiny):
    _, tokenizer = tiny
    spec = TASKS["hellaswag"].protocols["paper"]
    request = spec.request(HELLASWAG)
    full_context, full = tokenize_request(tokenizer, request, spec, 2048)
    limit = len(full_context) + 2
    context, truncated = tokenize_request(tokenizer, request, spec, limit)
    assert context == full_context
    assert truncated == [c[:2] for c in full]


def test_boolq_passage_beyond_512_tokens_loses_its_answer(tiny, cpu):
    model, tokenizer = tiny
    long = {
        "passage": "The interpreter reads the source line by line. " * 120,
        "question": "does the interpreter read the source",
        "answer": True,
    }
    short = {
        "passage": "Tuples are immutable sequences.",
        "question": "is a tuple immutable",
        "answer": True,
    }
    spec = TASKS["boolq"].protocols["paper"]
    context, answers = tokenize_request(tokenizer, spec.request(long), spec, 512)
    assert len(context) == 512 and answers == [[], []]
    metrics, items = evaluate_task(
        model, tokenizer, "boolq", "paper", [long, short], EVAL_SETTINGS, cpu
    )
    assert items[0]["n_tokens"] == [0, 0]
    assert items[0]["predictions"] == {"acc_ties_no": 1, "acc_ties_yes": 0}  # -inf == -inf
    assert items[1]["predictions"]["acc_ties_no"] == items[1]["predictions"]["acc_ties_yes"]
    short_right = float(items[1]["prediction"] == 0)
    assert metrics["acc_ties_no"] == metrics["accuracy"] == metrics["acc"] == short_right / 2
    assert metrics["acc_ties_yes"] == (1 + short_right) / 2


@pytest.mark.parametrize("fixture", ["tiny", "tiny_bos"])
def test_wikitext_blocks_equal_datasets_map_with_group_texts(fixture, request, standin):
    """The reference itself: `datasets.map(tokenize, batched=True)` then HF's `group_texts`
    (run_clm.py's) in a second batched map, on 2,300 rows with WikiText's blank rows."""
    from itertools import chain

    from datasets import Dataset

    _, tokenizer = request.getfixturevalue(fixture)
    rows = (standin["wikitext"] * 11)[:2300]
    assert sum(r["text"] == "" for r in rows) > 100

    def group_texts(examples: dict) -> dict:
        joined = {k: list(chain(*examples[k])) for k in examples}
        total = len(joined["input_ids"]) // 64 * 64
        return {k: [t[i : i + 64] for i in range(0, total, 64)] for k, t in joined.items()}

    tokenized = Dataset.from_list(rows).map(
        lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"]
    )
    reference = tokenized.map(group_texts, batched=True)["input_ids"]
    assert paper_blocks(tokenizer, rows, 64, None).tolist() == reference
