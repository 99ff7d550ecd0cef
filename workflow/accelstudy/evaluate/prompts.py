"""Task templates: how a HellaSwag or BoolQ row becomes a context and its choices.

Declared per (task, protocol), like lm-evaluation-harness tasks: data + template + metric.
The paper's protocol and lm-eval's differ in text, tokenisation and normalisation; both are
here by name so a record can say which one produced its number.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


def hellaswag_clean(text: str) -> str:
    """lm-eval's HellaSwag text cleaning (WikiHow bracket artefacts, double spaces)."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


@dataclass(frozen=True)
class ChoiceRequest:
    """One item: a context, candidate choice texts, and the delimiter between them."""

    context: str
    choices: list[str]
    gold: int
    delimiter: str = " "
    tie_break: int | None = None  # index chosen when normalised scores tie

    @property
    def continuations(self) -> list[str]:
        return [self.delimiter + c for c in self.choices]


def _hellaswag_ctx(row: dict) -> str:
    return row["ctx_a"] + " " + row["ctx_b"].capitalize()


def hellaswag_paper(row: dict) -> ChoiceRequest:
    """Cleaned ctx without the activity label; ' ' + ending."""
    return ChoiceRequest(
        context=hellaswag_clean(_hellaswag_ctx(row)),
        choices=[hellaswag_clean(e) for e in row["endings"]],
        gold=int(row["label"]),
    )


def hellaswag_lm_eval(row: dict) -> ChoiceRequest:
    """lm-eval's `hellaswag`: activity label prefixed, then the cleaned ctx."""
    return ChoiceRequest(
        context=hellaswag_clean(row["activity_label"] + ": " + _hellaswag_ctx(row)),
        choices=[hellaswag_clean(e) for e in row["endings"]],
        gold=int(row["label"]),
    )


def boolq_paper(row: dict) -> ChoiceRequest:
    """'Passage: ...\\nQuestion: ...\\nAnswer:' then ' yes' / ' no'; a tie answers 'no'."""
    return ChoiceRequest(
        context=f"Passage: {row['passage']}\nQuestion: {row['question']}\nAnswer:",
        choices=["yes", "no"],
        gold=0 if row["answer"] else 1,
        tie_break=1,
    )


def boolq_lm_eval(row: dict) -> ChoiceRequest:
    """lm-eval's `boolq` (super_glue): '{passage}\\nQuestion: {question}?\\nAnswer:', no/yes."""
    return ChoiceRequest(
        context=f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:",
        choices=["no", "yes"],
        gold=int(bool(row["answer"])),
    )


@dataclass(frozen=True)
class ChoiceProtocol:
    """How to turn rows into requests, tokenise them, and pick the answer."""

    build: Callable[[dict], ChoiceRequest]
    prepend_bos: bool  # paper: BOS always; lm-eval: whatever the tokenizer adds by default
    normalisation: str  # "token" (mean log-prob) or "none" (sum; acc_norm also reported)


CHOICE_PROTOCOLS: dict[tuple[str, str], ChoiceProtocol] = {
    ("hellaswag", "paper"): ChoiceProtocol(hellaswag_paper, True, "token"),
    ("hellaswag", "lm-eval"): ChoiceProtocol(hellaswag_lm_eval, False, "none"),
    ("boolq", "paper"): ChoiceProtocol(boolq_paper, True, "token"),
    ("boolq", "lm-eval"): ChoiceProtocol(boolq_lm_eval, False, "none"),
}
