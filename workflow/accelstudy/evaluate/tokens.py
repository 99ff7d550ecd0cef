"""Tokenisation as each protocol defines it."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


def encode(tokenizer: PreTrainedTokenizerBase, text: str, prepend_bos: bool) -> list[int]:
    """Paper: BOS + tokens (no other specials). lm-eval: the tokenizer's default encoding."""
    if not prepend_bos:
        return tokenizer.encode(text)
    ids = tokenizer.encode(text, add_special_tokens=False)
    bos = tokenizer.bos_token_id
    return ([bos] if bos is not None else []) + ids


def encode_pair(
    tokenizer: PreTrainedTokenizerBase, context: str, continuation: str, prepend_bos: bool
) -> tuple[list[int], list[int]]:
    """Split the tokens of context+continuation at the context's own token count.

    As lm-eval does: trailing spaces move from the context to the continuation, the whole
    string is encoded once, and the continuation is what follows the context's tokens.
    """
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole = encode(tokenizer, context + continuation, prepend_bos)
    context_ids = encode(tokenizer, context, prepend_bos)
    return context_ids, whole[len(context_ids) :]
