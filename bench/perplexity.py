"""Perplexity-evaluation throughput as a fraction of this machine's fp32 GEMM rate (MFU).

Both are measured in this run: the GEMM rate by the study's own probe (accelstudy.peak) on
all threads, the model's rate as tokens/s x forward FLOPs per token (accelstudy.flops, the
records' convention). Aim: at least 50%. Bound (common.judge, --tiny the same): the MFU
within (0, 1]: a forward cannot run faster than its matmuls at the measured dense rate, so
above 1 the probe or the FLOP count is wrong (at or below 0, nothing was timed).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.data.standin import standin_rows
from accelstudy.evaluate.perplexity import block_loss, paper_blocks
from accelstudy.flops import forward_per_token
from common import best_of, gemm_rates, judge, load_model, parse_args, set_threads


def main() -> int:
    args = parse_args(__doc__)
    set_threads(args.threads)
    model, tokenizer = load_model(args.tiny)
    block, batch = 512, 4
    blocks = paper_blocks(tokenizer, standin_rows("wikitext", "test"), block, limit=batch * 2)
    seconds = best_of(
        lambda: [block_loss(model, blocks[i : i + batch]) for i in (0, batch)],
        1 if args.tiny else 2,
    )
    tokens_per_s = blocks.numel() / seconds
    achieved = tokens_per_s * forward_per_token(model.config.to_dict(), block)
    peak = gemm_rates(args.threads, args.tiny)["float32"]  # the study's own limit, measured now
    print(
        f"ratio: MFU {achieved / peak:.3f}x: threads={args.threads} perplexity: {tokens_per_s:.0f} "
        f"tokens/s = {achieved / 1e9:.1f} GFLOP/s; fp32 GEMM probe: {peak / 1e9:.1f} GFLOP/s"
    )
    return judge({"mfu": achieved / peak}, {"mfu": (1e-9, 1.0)}, args.bound)


if __name__ == "__main__":
    sys.exit(main())
