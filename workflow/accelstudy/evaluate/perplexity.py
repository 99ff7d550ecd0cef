"""Perplexity: the paper's fixed 512-token blocks, or lm-eval's rolling-window word perplexity."""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from accelstudy.evaluate.meters import Meter
from accelstudy.evaluate.tokens import encode

_HEADING = re.compile(r"^ = [^=].* = \n?$")


def paper_blocks(
    tokenizer: PreTrainedTokenizerBase, rows: list[dict], block_size: int, limit: int | None
) -> torch.Tensor:
    """BOS + tokens of every row, concatenated, cut into blocks (remainder dropped)."""
    ids: list[int] = []
    for row in rows:
        ids.extend(encode(tokenizer, row["text"], prepend_bos=True))
        if limit is not None and len(ids) >= limit * block_size:
            break
    n_blocks = len(ids) // block_size
    if limit is not None:
        n_blocks = min(n_blocks, limit)
    if n_blocks == 0:
        raise ValueError(f"fewer than {block_size} tokens: no complete block to evaluate")
    return torch.tensor(ids[: n_blocks * block_size]).view(n_blocks, block_size)


def shifted_cross_entropy(logits: torch.Tensor, batch: torch.Tensor) -> tuple[float, int]:
    """Summed next-token cross-entropy of (B, T, V) logits and the number of targets.

    The last position of each row gets an ignored target instead of slicing the logits,
    which would copy the whole (B, T-1, V) tensor.
    """
    ignore = torch.full_like(batch[:, :1], -100)
    targets = torch.cat([batch[:, 1:], ignore], dim=1)
    loss = F.cross_entropy(
        logits.flatten(0, 1).float(), targets.flatten(), reduction="sum", ignore_index=-100
    )
    return float(loss), batch[:, 1:].numel()


@torch.inference_mode()
def block_loss(model: torch.nn.Module, batch: torch.Tensor) -> tuple[float, int]:
    """Summed next-token cross-entropy over a batch of blocks and the number of targets."""
    return shifted_cross_entropy(model(batch).logits, batch)


def perplexity_paper(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[dict],
    meter: Meter,
    block_size: int,
    batch_size: int,
    limit: int | None,
) -> dict[str, float]:
    """exp(token-weighted mean cross-entropy over the shifted positions of all blocks)."""
    blocks = paper_blocks(tokenizer, rows, block_size, limit)
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in tqdm(range(0, len(blocks), batch_size), desc="perplexity", unit="batch"):
        batch = blocks[start : start + batch_size].to(device)
        loss, n = block_loss(model, batch)
        total, count = total + loss, count + n
        meter.add(batch.numel())
    return {"perplexity": math.exp(total / count), "blocks": len(blocks), "nll": total / count}


def documents(rows: list[dict]) -> list[str]:
    """WikiText rows grouped into articles at top-level ' = Title = ' headings."""
    docs: list[list[str]] = []
    for row in rows:
        if _HEADING.match(row["text"]) or not docs:
            docs.append([])
        docs[-1].append(row["text"])
    return ["".join(d).strip() for d in docs if "".join(d).strip()]


@torch.inference_mode()
def perplexity_lm_eval(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[dict],
    meter: Meter,
    max_length: int,
    limit: int | None,
) -> dict[str, float]:
    """lm-eval's loglikelihood_rolling over documents: word/byte perplexity, bits per byte."""
    device = next(model.parameters()).device
    prefix = (
        tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    )
    docs = documents(rows)[:limit] if limit else documents(rows)
    total_ll, words, n_bytes, targets_seen = 0.0, 0, 0, 0
    for doc in tqdm(docs, desc="rolling perplexity", unit="doc"):
        tokens = encode(tokenizer, doc, prepend_bos=False)
        windows = get_rolling_token_windows(tokens, prefix, max_length, 1)
        for context, continuation in map(make_disjoint_window, windows):
            inputs = torch.tensor([(context + continuation)[:-1]], device=device)
            logprobs = F.log_softmax(model(inputs).logits[0].float(), dim=-1)
            targets = torch.tensor(continuation, device=device)
            picked = logprobs[-len(continuation) :].gather(1, targets[:, None])
            total_ll += float(picked.double().sum())
            targets_seen += len(continuation)
            meter.add(inputs.numel())
        words += len(re.split(r"\s+", doc))
        n_bytes += len(doc.encode("utf-8"))
    return {
        "word_perplexity": math.exp(-total_ll / words),
        "byte_perplexity": math.exp(-total_ll / n_bytes),
        "bits_per_byte": -total_ll / n_bytes / math.log(2),
        "perplexity": math.exp(-total_ll / words),
        "documents": len(docs),
        "target_tokens": targets_seen,
    }
