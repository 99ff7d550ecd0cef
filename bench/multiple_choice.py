"""Shared-context multiple-choice scoring vs. scoring each (context + ending) separately.

Prints time ratios measured in this run, the largest log-likelihood difference, and
whether every prediction agrees. Target: shared >= 2x faster than separate, diff <= 1e-4.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/

from accelstudy.data.standin import standin_rows
from accelstudy.evaluate.multiple_choice import decide, score_items, tokenize_request
from accelstudy.evaluate.prompts import CHOICE_PROTOCOLS
from common import best_of, load_model, parse_args, set_threads

from tests.scoring_references import (
    score_padded_batch,
    score_separately,
    score_shared_context,
)


def main() -> int:
    args = parse_args(__doc__)
    set_threads(args.threads)
    model, tokenizer = load_model(args.tiny)
    ok = True
    for task in ("hellaswag", "boolq"):
        spec = CHOICE_PROTOCOLS[(task, "paper")]
        requests = [spec.build(r) for r in standin_rows(task, "validation")[: args.items]]
        inputs = [tokenize_request(tokenizer, r, spec, 2048) for r in requests]

        def run(score, inputs=inputs):
            return [score(model, ctx, conts) for ctx, conts in inputs]

        def evaluator(inputs=inputs):  # what the evaluation jobs do: batched shared contexts
            return score_items(model, inputs, max_length=2048)

        methods = {
            "shared": evaluator,
            "shared-1": lambda run=run: run(score_shared_context),
            "separate": lambda run=run: run(score_separately),
            "padded": lambda run=run: run(score_padded_batch),
        }
        results = {name: fn() for name, fn in methods.items()}
        times = {name: best_of(fn, repeats=2) for name, fn in methods.items()}
        shared, separate = results["shared"], results["separate"]
        diff = max(
            abs(a.loglikelihood - b.loglikelihood)
            for sa, sb in zip(shared, separate, strict=True)
            for a, b in zip(sa, sb, strict=True)
        )
        same = all(
            decide(r, a, spec).prediction == decide(r, b, spec).prediction
            for r, a, b in zip(requests, shared, separate, strict=True)
        )
        speedup = times["separate"] / times["shared"]
        print(
            f"ratio: {task} items={len(inputs)} shared={times['shared']:.2f}s "
            f"(one item per batch {times['shared-1']:.2f}s) separate={times['separate']:.2f}s "
            f"padded-batch={times['padded']:.2f}s | speed-up vs separate {speedup:.2f}x, "
            f"vs padded batch {times['padded'] / times['shared']:.2f}x, one item per batch vs "
            f"separate {times['separate'] / times['shared-1']:.2f}x | max |dLL|={diff:.2e} "
            f"predictions identical={same}"
        )
        ok &= diff <= 1e-4 and same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
