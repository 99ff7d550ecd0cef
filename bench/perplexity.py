"""Perplexity-evaluation throughput as a fraction of this machine's dense fp32 matmul rate.

Both are measured in this run: the matmul rate with square fp32 matmuls on all threads,
the model's rate as (tokens/s x forward FLOPs per token). Aim: at least 50%.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.data.standin import standin_rows
from accelstudy.evaluate.perplexity import block_loss, paper_blocks
from common import best_of, load_model, parse_args, set_threads


def matmul_flops(n: int = 2048) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    seconds = best_of(lambda: a @ b, repeats=5)
    return 2 * n**3 / seconds


def forward_flops_per_token(model: torch.nn.Module, seq: int) -> float:
    """2 x (matmul parameters incl. lm_head) + causal attention scores and values."""
    cfg = model.config
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    head_dim = getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    attention = 2 * 2 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * (seq / 2)
    return 2 * linear + attention


def main() -> int:
    args = parse_args(__doc__)
    set_threads(args.threads)
    model, tokenizer = load_model(args.tiny)
    block, batch = 512, 4
    blocks = paper_blocks(tokenizer, standin_rows("wikitext", "test"), block, limit=batch * 2)
    seconds = best_of(lambda: [block_loss(model, blocks[i : i + batch]) for i in (0, batch)], 2)
    tokens_per_s = blocks.numel() / seconds
    achieved = tokens_per_s * forward_flops_per_token(model, block)
    peak = matmul_flops()
    print(
        f"threads={args.threads} perplexity: {tokens_per_s:.0f} tokens/s = {achieved / 1e9:.1f} "
        f"GFLOP/s; dense fp32 matmul: {peak / 1e9:.1f} GFLOP/s; "
        f"fraction of matmul rate: {achieved / peak:.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
