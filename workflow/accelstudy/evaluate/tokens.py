"""Tokenisation as each protocol defines it: both encode with the tokenizer's default special
tokens, as the authors' scripts call `tokenizer(text)` (BOS for TinyLlama, nothing for
SmolLM2) and lm-eval's HFLM does, unless the text already starts with its prefix token."""

from __future__ import annotations

from lm_eval.models.utils import has_bos_prefix
from transformers import PreTrainedTokenizerBase


def lm_eval_prefix(tokenizer: PreTrainedTokenizerBase) -> int:
    """lm-eval's prefix token (HFLM.prefix_token_id): BOS, else EOS."""
    bos = tokenizer.bos_token_id
    return bos if bos is not None else tokenizer.eos_token_id


def encode(tokenizer: PreTrainedTokenizerBase, text: str, protocol: str = "paper") -> list[int]:
    """`tokenizer(text)`; under lm-eval no specials where the text starts with the prefix."""
    if protocol == "lm-eval" and has_bos_prefix(text, tokenizer.decode(lm_eval_prefix(tokenizer))):
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(text)


def encode_pair(
    tokenizer: PreTrainedTokenizerBase, context: str, continuation: str, protocol: str = "paper"
) -> tuple[list[int], list[int]]:
    """Split the tokens of context+continuation at the context's own token count, as lm-eval
    does: trailing spaces move to the continuation, and the whole string is encoded once."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole = encode(tokenizer, context + continuation, protocol)
    context_ids = encode(tokenizer, context, protocol)
    return context_ids, whole[len(context_ids) :]
