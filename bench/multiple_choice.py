"""Shared-context multiple-choice scoring vs. scoring each (context + ending) separately.

Prints time ratios measured in this run, the largest log-likelihood difference, and
whether every prediction agrees. Target: shared >= 2x faster than separate (met on BoolQ; the
HellaSwag stand-in's short contexts leave at most ~1.8x: docs/benchmarks.md).
Bounds, per task (common.judge): the largest |log-likelihood difference| at most 1e-4 (the same
numbers, computed two ways, in FP32) and every prediction identical; shared at least as fast as
separate (1x: sharing a context can only remove work). --tiny (a tiny random model, 4 items,
on a machine that may be busy): the same, but speed-ups only above 0 (each timed).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.data.standin import standin_rows
from accelstudy.evaluate.multiple_choice import decide, score_items, tokenize_request
from accelstudy.tasks import TASKS
from common import best_of, judge, load_model, parse_args, set_threads
from scoring_references import score_padded_batch, score_separately, score_shared_context


def main() -> int:
    args = parse_args(__doc__)
    set_threads(args.threads)
    model, tokenizer = load_model(args.tiny)
    figures, bounds = {}, {}
    for task in ("hellaswag", "boolq"):
        spec = TASKS[task].protocols["paper"]
        requests = [spec.request(r) for r in standin_rows(task, "validation")[: args.items]]
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
        results = {name: fn() for name, fn in methods.items()}  # also their warm-up
        repeats = 1 if args.tiny else 2
        times = {name: best_of(fn, repeats, warm_up=False) for name, fn in methods.items()}
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
        figures |= {f"{task}_max_dll": diff, f"{task}_same_predictions": float(same)}
        figures[f"{task}_speedup"] = speedup
        bounds |= {f"{task}_max_dll": (None, 1e-4), f"{task}_same_predictions": (1.0, 1.0)}
        bounds[f"{task}_speedup"] = (1e-9 if args.tiny else 1.0, None)
    return judge(figures, bounds, args.bound)


if __name__ == "__main__":
    sys.exit(main())
