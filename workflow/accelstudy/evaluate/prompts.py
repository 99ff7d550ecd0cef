"""HellaSwag and BoolQ rows to a context and choices per protocol (their tasks.TaskSpec names
them); how each tokenises."""

import re
from dataclasses import dataclass

from lm_eval.models.utils import has_bos_prefix
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy.data.sources import boolq_answer


def hellaswag_clean(text: str) -> str:
    """lm-eval's HellaSwag text cleaning (WikiHow bracket artefacts, double spaces)."""
    return re.sub("\\[.*?\\]", "", text.strip().replace(" [title]", ". ")).replace("  ", " ")


@dataclass(frozen=True)
class ChoiceRequest:
    """One item: a context, candidate choice texts (each continues it after a space), the gold."""

    context: str
    choices: list[str]
    gold: int


def _hellaswag(context: str, row: dict) -> ChoiceRequest:
    endings = [hellaswag_clean(e) for e in row["endings"]]
    return ChoiceRequest(hellaswag_clean(context), endings, int(row["label"]))


def hellaswag_paper(row: dict) -> ChoiceRequest:
    """The scripts' context: `ctx` as is (ctx_b keeps its lower-case first letter; without `ctx`,
    ctx_a + ' ' + ctx_b, as HF builds it), cleaned, no activity label; ' ' + ending."""
    return _hellaswag(row.get("ctx") or row["ctx_a"] + " " + row["ctx_b"], row)


def hellaswag_lm_eval(row: dict) -> ChoiceRequest:
    """lm-eval's `hellaswag`: activity label prefixed, then the cleaned ctx."""
    return _hellaswag(f"{row['activity_label']}: {row['ctx_a']} {row['ctx_b'].capitalize()}", row)


def boolq_paper(row: dict) -> ChoiceRequest:
    """'Passage: ...\\nQuestion: ...\\nAnswer:' then ' yes' / ' no'."""
    context = f"Passage: {row['passage']}\nQuestion: {row['question']}\nAnswer:"
    return ChoiceRequest(context, ["yes", "no"], 0 if boolq_answer(row["answer"]) else 1)


def boolq_lm_eval(row: dict) -> ChoiceRequest:
    """lm-eval's `boolq` (super_glue): '{passage}\\nQuestion: {question}?\\nAnswer:', no/yes."""
    context = f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:"
    return ChoiceRequest(context, ["no", "yes"], int(boolq_answer(row["answer"])))


def lm_eval_prefix(tokenizer: Tokenizer) -> int:
    """lm-eval's prefix token (HFLM.prefix_token_id): BOS, else EOS."""
    bos = tokenizer.bos_token_id
    return bos if bos is not None else tokenizer.eos_token_id


def encode(tokenizer: Tokenizer, text: str, protocol: str = "paper") -> list[int]:
    """`tokenizer(text)` with default special tokens (TinyLlama: BOS, SmolLM2: none) as the scripts
    and lm-eval's HFLM do; under lm-eval none where the text already starts with its prefix."""
    if protocol == "lm-eval" and has_bos_prefix(text, tokenizer.decode(lm_eval_prefix(tokenizer))):
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(text)


def encode_pair(
    tokenizer: Tokenizer, context: str, continuation: str, protocol: str = "paper"
) -> tuple[list[int], list[int]]:
    """lm-eval's split: the whole string encoded once, cut at context.rstrip()'s token count."""
    context_ids = encode(tokenizer, context.rstrip(), protocol)
    return context_ids, encode(tokenizer, context + continuation, protocol)[len(context_ids) :]
