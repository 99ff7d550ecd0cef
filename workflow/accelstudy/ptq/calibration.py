"""Calibration sets for the sensitivity scan: token batches plus how to score their logits.

Perplexity uses the paper's WikiText blocks; HellaSwag and BoolQ the paper's protocol, each
(context + choice) one row of a per-item batch, so a scan can run any suffix of the network
on cached hidden states and still compute the metric."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from accelstudy.evaluate.multiple_choice import decide, tokenize_request
from accelstudy.evaluate.perplexity import paper_blocks, shifted_cross_entropy
from accelstudy.evaluate.prompts import CHOICE_PROTOCOLS, ChoiceProtocol, ChoiceRequest
from accelstudy.evaluate.scoring import Score, pad_right


@dataclass
class Calibration:
    """Token batches and, for accuracy tasks, what each row of each batch scores."""

    kind: str  # "perplexity" | "accuracy"
    batches: list[torch.Tensor]
    protocol: ChoiceProtocol | None = None
    requests: list[ChoiceRequest] = field(default_factory=list)
    layouts: list[list[tuple[int, list[int]]]] = field(default_factory=list)  # (start, cont)

    @property
    def tokens(self) -> int:
        return sum(b.numel() for b in self.batches)

    def contribution(self, index: int, logits: torch.Tensor) -> tuple[float, int]:
        """(summed loss, count) for perplexity; (correct, 1) for accuracy."""
        batch = self.batches[index]
        if self.kind == "perplexity":
            return shifted_cross_entropy(logits, batch.to(logits.device))
        logprobs = F.log_softmax(logits.float(), dim=-1)
        scores = []
        for row, (start, cont) in enumerate(self.layouts[index]):
            picked = logprobs[row, start - 1 : start - 1 + len(cont)]
            targets = torch.tensor(cont, dtype=torch.long, device=picked.device)
            ll = picked.gather(1, targets[:, None]).sum()
            scores.append(Score(float(ll.double()), len(cont), False))
        request = self.requests[index]
        return float(decide(request, scores, self.protocol).prediction == request.gold), 1

    def metric(self, contributions: list[tuple[float, int]]) -> float:
        total = sum(c for c, _ in contributions)
        count = sum(n for _, n in contributions)
        return math.exp(total / count) if self.kind == "perplexity" else total / count


def perplexity_calibration(
    tokenizer: PreTrainedTokenizerBase, rows: list[dict], block_size: int, batch_size: int,
    n_blocks: int | None,
) -> Calibration:  # fmt: skip
    blocks = paper_blocks(tokenizer, rows, block_size, n_blocks)
    return Calibration("perplexity", list(torch.split(blocks, batch_size)))


def choice_calibration(
    tokenizer: PreTrainedTokenizerBase, task: str, rows: list[dict], n_items: int | None,
    max_length: int,
) -> Calibration:  # fmt: skip
    """One batch per item: each choice's (context + continuation)[:-1], right-padded."""
    spec = CHOICE_PROTOCOLS[(task, "paper")]
    calibration = Calibration("accuracy", [], spec)
    for row in rows[:n_items] if n_items else rows:
        request = spec.build(row)
        context, continuations = tokenize_request(tokenizer, request, spec, max_length)
        calibration.batches.append(pad_right([(context + c)[:-1] for c in continuations]))
        calibration.requests.append(request)
        calibration.layouts.append([(len(context), c) for c in continuations])
    return calibration
