"""Perplexity: the paper's 512-token blocks, or lm-eval's `wikitext` rolling word perplexity."""

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from lm_eval.api.metrics import bits_per_byte, weighted_perplexity
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from torch import nn
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase as Tokenizer

from accelstudy.evaluate import Scoring
from accelstudy.evaluate.prompts import encode, lm_eval_prefix

GROUP_TEXTS_ROWS = 1000  # datasets.map's default batch, within which group_texts concatenates


def lm_eval_wikitext() -> ModuleType:
    """lm-eval's WikiText task file (its detokenizer and `process_results`), loaded alone: as
    `lm_eval.tasks.wikitext...` it would first import lm_eval.tasks, its task registry and
    `datasets`, a fifth of a second of every WikiText job's start."""
    spec = importlib.util.find_spec("lm_eval")
    assert spec is not None and spec.submodule_search_locations, "lm_eval is a dependency"
    path = Path(spec.submodule_search_locations[0]) / "tasks/wikitext/preprocess_wikitext.py"
    task_file = importlib.util.spec_from_file_location("lm_eval_wikitext_task", path)
    assert task_file is not None and task_file.loader is not None
    module = importlib.util.module_from_spec(task_file)
    task_file.loader.exec_module(module)
    return module


def paper_blocks(tokenizer: Tokenizer, rows: list, size: int, limit: int | None) -> torch.Tensor:
    """The authors' first `limit` blocks: `tokenizer(text)` per row (empty too, default special
    tokens), HF's `group_texts` per 1,000-row `datasets.map` batch, its remainder dropped."""
    blocks: list[list[int]] = []
    for start in range(0, len(rows), GROUP_TEXTS_ROWS):
        texts = [row["text"] for row in rows[start : start + GROUP_TEXTS_ROWS]]
        ids = [t for encoded in tokenizer(texts)["input_ids"] for t in encoded]
        blocks.extend(ids[i : i + size] for i in range(0, len(ids) - size + 1, size))
        if limit is not None and len(blocks) >= limit:
            break
    blocks = blocks[:limit]
    if not blocks:
        raise ValueError(f"no {GROUP_TEXTS_ROWS}-row batch holds {size} tokens: no block")
    return torch.tensor(blocks)


def shifted_cross_entropy(logits: torch.Tensor, batch: torch.Tensor) -> tuple[float, int]:
    """Summed next-token loss and target count (last target ignored: slicing would copy logits)."""
    targets = torch.cat([batch[:, 1:], torch.full_like(batch[:, :1], -100)], dim=1).flatten()
    flat = logits.flatten(0, 1).float()
    loss = F.cross_entropy(flat, targets, reduction="sum", ignore_index=-100)
    return float(loss), batch[:, 1:].numel()


@torch.inference_mode()
def block_loss(model: nn.Module, batch: torch.Tensor) -> tuple[float, int, list[float]]:
    """The batch's summed loss and target count (as the paper sums), and each block's loss."""
    logits = model(batch).logits
    targets = torch.cat([batch[:, 1:], torch.full_like(batch[:, :1], -100)], dim=1).flatten()
    each = F.cross_entropy(logits.flatten(0, 1).float(), targets, reduction="none")
    return *shifted_cross_entropy(logits, batch), each.view(len(batch), -1).sum(1).tolist()


def documents(rows: list[dict]) -> list[str]:
    """Pages as EleutherAI/wikitext_document_level builds them from HF's rows (each line with its
    newline; a blank one, a single space in the raw file, as ""; the file ends with "\n", so its
    split ends with ""): a page starts at each line reading '= Title =' once '= = =' and '= =' are
    collapsed and it is stripped; a page only of whitespace is dropped unless it is the last."""
    pages: list[str] = []
    lines: list[str] = []
    for line in [row["text"].removesuffix("\n") if row["text"] else " " for row in rows] + [""]:
        heading = line.replace("= = =", "===").replace("= =", "==").strip()
        if heading.startswith("= ") and heading.endswith(" ="):
            if "\n".join(lines).strip():
                pages.append("\n".join(lines))
            lines = []
        lines.append(line)
    return [*pages, "\n".join(lines)]


@torch.inference_mode()
def score(scoring: Scoring) -> tuple[dict, list[dict]]:
    """The paper's: exp(token-weighted mean cross-entropy over all blocks' shifted positions).
    lm-eval's `wikitext`: its detokenizer, loglikelihood_rolling (disjoint windows, each token a
    target once), process_results, weighted perplexity and bits/byte over documents."""
    model, tokenizer, protocol = scoring.model, scoring.tokenizer, scoring.protocol
    rows, settings, meter, limit = scoring.rows, scoring.settings, scoring.meter, scoring.limit
    device = next(model.parameters()).device
    items: list[dict] = []  # per block or document: what its perplexity sums (to pair, resample)
    if protocol == "paper":
        blocks, losses = paper_blocks(tokenizer, rows, settings["block_size"], limit), []
        for batch in tqdm(blocks.split(settings["batch_size"]), desc="perplexity", unit="batch"):
            loss, count, each = block_loss(model, batch.to(device))
            losses.append((loss, count))
            targets = batch.shape[1] - 1
            items += [
                {"item": len(items) + k, "nll": v, "tokens": targets} for k, v in enumerate(each)
            ]
            meter.ran([batch.shape[1]] * batch.shape[0])
        nll = sum(loss for loss, _ in losses) / sum(n for _, n in losses)
        return {"perplexity": math.exp(nll), "blocks": len(blocks), "nll": nll}, items
    docs, wikitext = documents(rows)[: limit or None], lm_eval_wikitext()
    results: dict[str, list[tuple[float, int]]] = {}
    n_tokens, prefix, max_length = 0, lm_eval_prefix(tokenizer), settings["lm_eval_max_length"]
    for page in tqdm(docs, desc="rolling perplexity", unit="doc"):
        tokens = encode(tokenizer, wikitext.wikitext_detokenizer({"page": page}), "lm-eval")
        n_tokens += len(tokens)
        loglikelihood, windows = 0.0, get_rolling_token_windows(tokens, prefix, max_length, 1)
        for context, continuation in map(make_disjoint_window, windows):
            inputs = torch.tensor([(context + continuation)[:-1]], device=device)
            logprobs = F.log_softmax(model(inputs).logits[0].float(), dim=-1)
            targets = torch.tensor(continuation, device=device)
            picked = logprobs[-len(continuation) :].gather(1, targets[:, None])
            loglikelihood += float(picked.double().sum())
            meter.ran([inputs.shape[1]])
        for name, pair in wikitext.process_results({"page": page}, [loglikelihood]).items():
            results.setdefault(name, []).append(pair)
        words, page_bytes = results["word_perplexity"][-1][1], results["byte_perplexity"][-1][1]
        items.append({"item": len(items), "neg_loglikelihood": -loglikelihood, "words": words,
                      "bytes": page_bytes, "tokens": len(tokens)})  # fmt: skip
    metrics = {n: weighted_perplexity(results[n]) for n in ("word_perplexity", "byte_perplexity")}
    metrics["bits_per_byte"] = bits_per_byte(results["bits_per_byte"])
    metrics["perplexity"] = metrics["word_perplexity"]
    return {**metrics, "documents": len(docs), "target_tokens": n_tokens}, items
