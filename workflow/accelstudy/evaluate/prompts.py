"""Task templates: how a HellaSwag or BoolQ row becomes a context and its choices, declared
per (task, protocol) like lm-evaluation-harness tasks. The paper's protocol and lm-eval's
differ in text, tokenisation and normalisation; both are here by name so a record can say
which one produced its number."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from accelstudy.data.values import boolq_answer


def hellaswag_clean(text: str) -> str:
    """lm-eval's HellaSwag text cleaning (WikiHow bracket artefacts, double spaces)."""
    text = re.sub("\\[.*?\\]", "", text.strip().replace(" [title]", ". "))
    return text.replace("  ", " ")


@dataclass(frozen=True)
class ChoiceRequest:
    """One item: a context, candidate choice texts, and the delimiter between them."""

    context: str
    choices: list[str]
    gold: int
    delimiter: str = " "

    @property
    def continuations(self) -> list[str]:
        return [self.delimiter + c for c in self.choices]


def _hellaswag(context: str, row: dict) -> ChoiceRequest:
    endings = [hellaswag_clean(e) for e in row["endings"]]
    return ChoiceRequest(hellaswag_clean(context), endings, int(row["label"]))


def hellaswag_paper(row: dict) -> ChoiceRequest:
    """The scripts' context: the raw `ctx` field, cleaned (ctx_b keeps its lower-case first
    letter), no activity label; ' ' + ending. A file without `ctx` gets ctx_a + ' ' + ctx_b,
    as the HF set builds `ctx`."""
    return _hellaswag(row.get("ctx") or row["ctx_a"] + " " + row["ctx_b"], row)


def hellaswag_lm_eval(row: dict) -> ChoiceRequest:
    """lm-eval's `hellaswag`: activity label prefixed, then the cleaned ctx."""
    context = row["ctx_a"] + " " + row["ctx_b"].capitalize()
    return _hellaswag(row["activity_label"] + ": " + context, row)


def boolq_paper(row: dict) -> ChoiceRequest:
    """'Passage: ...\\nQuestion: ...\\nAnswer:' then ' yes' / ' no'."""
    return ChoiceRequest(
        context=f"Passage: {row['passage']}\nQuestion: {row['question']}\nAnswer:",
        choices=["yes", "no"],
        gold=0 if boolq_answer(row["answer"]) else 1,
    )


def boolq_lm_eval(row: dict) -> ChoiceRequest:
    """lm-eval's `boolq` (super_glue): '{passage}\\nQuestion: {question}?\\nAnswer:', no/yes."""
    return ChoiceRequest(
        context=f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:",
        choices=["no", "yes"],
        gold=int(boolq_answer(row["answer"])),
    )


FIRST_INDEX = {"acc": None}  # np.argmax: the first best choice wins a tie
# The authors' BoolQ scripts differ only in ties (both scores -inf included): the Gaudi
# scripts predict yes only if yes > no, the A100 scripts if yes >= no. Both are recorded;
# the first is the protocol's `accuracy`.
BOOLQ_TIES = {"acc_ties_no": 1, "acc_ties_yes": 0}


@dataclass(frozen=True)
class ChoiceProtocol:
    """How to turn rows into requests, tokenise them, and pick the answer."""

    build: Callable[[dict], ChoiceRequest]
    name: str  # "paper" | "lm-eval": how texts are encoded (evaluate/tokens.py)
    normalisation: str  # "token" (mean log-prob) or "none" (sum; acc_norm also reported)
    truncation: str  # "right": the scripts keep the first max_length tokens; "left": lm-eval
    ties: dict[str, int | None]  # accuracy name -> the choice index a tie goes to


CHOICE_PROTOCOLS: dict[tuple[str, str], ChoiceProtocol] = {
    ("hellaswag", "paper"): ChoiceProtocol(hellaswag_paper, "paper", "token", "right", FIRST_INDEX),
    ("hellaswag", "lm-eval"): ChoiceProtocol(
        hellaswag_lm_eval, "lm-eval", "none", "left", FIRST_INDEX
    ),
    ("boolq", "paper"): ChoiceProtocol(boolq_paper, "paper", "token", "right", BOOLQ_TIES),
    ("boolq", "lm-eval"): ChoiceProtocol(boolq_lm_eval, "lm-eval", "none", "left", FIRST_INDEX),
}
