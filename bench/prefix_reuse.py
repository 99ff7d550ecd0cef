"""Sensitivity scan with prefix reuse vs. the naive scan (a full forward per layer).

Both scan every decoder layer of the model on the same WikiText calibration blocks, in this
run; prints the time ratio (target <= 0.6, not held to with --tiny: a tiny model is all
overhead) and the largest relative score difference.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.data.standin import standin_rows
from accelstudy.ptq.prune import targets
from accelstudy.ptq.sensitivity import build_calibration, scan
from common import load_model, parse_args, set_threads


def main() -> int:
    args = parse_args(__doc__)
    set_threads(args.threads)
    model, tokenizer = load_model(args.tiny)
    rows, settings = standin_rows("wikitext", "validation"), {"block_size": 512, "batch_size": 4}
    calibration = build_calibration(tokenizer, "wikitext", rows, 4, settings)
    all_targets = targets(model, "layer")
    timings, results = {}, {}
    for name, reuse in (("prefix", True), ("naive", False)):
        start = time.perf_counter()
        results[name] = scan(model, calibration, all_targets, 0.3, prefix_reuse=reuse)
        timings[name] = time.perf_counter() - start
    worst = max(
        abs(a.metric - b.metric) / abs(b.metric)
        for a, b in zip(results["prefix"][1], results["naive"][1], strict=True)
    )
    ratio = timings["prefix"] / timings["naive"]
    print(
        f"ratio: prefix/naive {ratio:.2f}x (target <= 0.6) layers={len(all_targets)} "
        f"tokens={calibration.tokens} prefix={timings['prefix']:.1f}s "
        f"naive={timings['naive']:.1f}s "
        f"max relative metric difference={worst:.1e}"
    )
    return 0 if (ratio <= 0.6 or args.tiny) and worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
