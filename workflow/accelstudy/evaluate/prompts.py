"""Task templates: how a HellaSwag or BoolQ row becomes a context and its choices per (task,
protocol), as lm-evaluation-harness tasks, and how a protocol tokenises text. The paper's and
lm-eval's differ in text, tokenisation and normalisation; a record names which it used."""

import re
from collections.abc import Callable
from dataclasses import dataclass

from lm_eval.models.utils import has_bos_prefix
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy.data.sources import boolq_answer


def hellaswag_clean(text: str) -> str:
    """lm-eval's HellaSwag text cleaning (WikiHow bracket artefacts, double spaces)."""
    text = re.sub("\\[.*?\\]", "", text.strip().replace(" [title]", ". "))
    return text.replace("  ", " ")


@dataclass(frozen=True)
class ChoiceRequest:
    """One item: a context, candidate choice texts (each continues it after a space), the gold."""

    context: str
    choices: list[str]
    gold: int

    @property
    def continuations(self) -> list[str]:
        return [" " + c for c in self.choices]


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
    context = f"Passage: {row['passage']}\nQuestion: {row['question']}\nAnswer:"
    return ChoiceRequest(context, ["yes", "no"], 0 if boolq_answer(row["answer"]) else 1)


def boolq_lm_eval(row: dict) -> ChoiceRequest:
    """lm-eval's `boolq` (super_glue): '{passage}\\nQuestion: {question}?\\nAnswer:', no/yes."""
    context = f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:"
    return ChoiceRequest(context, ["no", "yes"], int(boolq_answer(row["answer"])))


FIRST_INDEX = {"acc": None}  # np.argmax: the first best choice wins a tie
# The authors' BoolQ scripts differ only in ties (both scores -inf included): the Gaudi
# scripts predict yes only if yes > no, the A100 scripts if yes >= no. Both are recorded;
# the first is the protocol's `accuracy`.
BOOLQ_TIES = {"acc_ties_no": 1, "acc_ties_yes": 0}


@dataclass(frozen=True)
class ChoiceProtocol:
    """How to turn rows into requests, tokenise them, and pick the answer."""

    build: Callable[[dict], ChoiceRequest]
    name: str  # "paper" | "lm-eval": how texts are encoded (`encode`)
    normalisation: str  # "token" (mean log-prob) or "none" (sum; acc_norm also reported)
    truncation: str  # "right": the scripts keep the first max_length tokens; "left": lm-eval
    ties: dict[str, int | None]  # accuracy name -> the choice index a tie goes to
    quoted: str = "acc"  # the `accuracy`: lm-eval users quote acc_norm for HellaSwag


CHOICE_PROTOCOLS: dict[tuple[str, str], ChoiceProtocol] = {
    ("hellaswag", "paper"): ChoiceProtocol(hellaswag_paper, "paper", "token", "right", FIRST_INDEX),
    ("hellaswag", "lm-eval"): ChoiceProtocol(
        hellaswag_lm_eval, "lm-eval", "none", "left", FIRST_INDEX, "acc_norm"
    ),
    ("boolq", "paper"): ChoiceProtocol(boolq_paper, "paper", "token", "right", BOOLQ_TIES),
    ("boolq", "lm-eval"): ChoiceProtocol(boolq_lm_eval, "lm-eval", "none", "left", FIRST_INDEX),
}


def lm_eval_prefix(tokenizer: Tokenizer) -> int:
    """lm-eval's prefix token (HFLM.prefix_token_id): BOS, else EOS."""
    bos = tokenizer.bos_token_id
    return bos if bos is not None else tokenizer.eos_token_id


def encode(tokenizer: Tokenizer, text: str, protocol: str = "paper") -> list[int]:
    """`tokenizer(text)` with the tokenizer's default special tokens, as the authors' scripts
    (BOS for TinyLlama, nothing for SmolLM2) and lm-eval's HFLM do; under lm-eval none where
    the text already starts with its prefix token."""
    if protocol == "lm-eval" and has_bos_prefix(text, tokenizer.decode(lm_eval_prefix(tokenizer))):
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(text)


def encode_pair(
    tokenizer: Tokenizer, context: str, continuation: str, protocol: str = "paper"
) -> tuple[list[int], list[int]]:
    """Split the tokens of context+continuation at the context's own token count, as lm-eval
    does: trailing spaces move to the continuation, and the whole string is encoded once."""
    stripped = context.rstrip()
    context, continuation = stripped, context[len(stripped) :] + continuation
    whole = encode(tokenizer, context + continuation, protocol)
    context_ids = encode(tokenizer, context, protocol)
    return context_ids, whole[len(context_ids) :]
