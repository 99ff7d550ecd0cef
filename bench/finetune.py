"""Fine-tuning throughput of DDP vs ZeRO-3 vs FSDP at 2 processes, measured in one run, and
the memory planner's error on each point.

Each strategy trains the same LoRA point (the embedded SmolLM2-135M, or --tiny) through the
launcher the pipeline uses; the ratios are tokens/s against DDP in the same run, and the
planner's predicted model-state bytes and peak against what the ranks measured.
Bounds (common.judge, --tiny the same): each strategy's tokens/s above 0 and at most 2x DDP's
(on the same cores, sharding trades memory for communication: it cannot halve DDP's work per
token); the planner's model-state bytes within 1% of the ranks' count (it counts the same
parameters, gradients and optimizer states; the peak's error is bench/planner.py's to bound).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.finetune.planner import plan_card
from accelstudy.models import load_model_config, save_prepared
from accelstudy.points import FinetunePoint
from accelstudy.strategies import STRATEGIES, states_held
from common import judge, launch_point, load_model, parse_args


def point(strategy: str, tiny: bool) -> FinetunePoint:
    """The study's recipe (the schema's defaults: LoRA r64 on q and v, bf16, 2 x 2 blocks of 512
    tokens, 64 with --tiny) on 2 processes, 6 steps."""
    seq = 64 if tiny else 512
    return FinetunePoint(strategy=strategy, cards=2, max_seq_length=seq, max_steps=6)


def run(strategy: str, model_dir: Path, tiny: bool, threads: int) -> tuple[dict, FinetunePoint]:
    """(the ranks' result, the point) of one 2-process run through the launcher."""
    spec = point(strategy, tiny)
    out = model_dir.parent / f"{strategy}.json"
    return launch_point(spec, model_dir, out, "cpu", threads), spec


def main() -> int:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory(prefix="bench-finetune-") as scratch:
        model_dir = Path(scratch) / "model"
        save_prepared(*load_model(args.tiny), model_dir)
        config = load_model_config(model_dir)
        results = {s: run(s, model_dir, args.tiny, args.threads) for s in STRATEGIES}
    base = results["ddp"][0]["metrics"]["tokens_per_s"]
    figures, bounds = {}, {}
    for strategy, (result, spec) in results.items():
        metrics = result["metrics"]
        predicted = plan_card(config, spec, "cpu")
        held = states_held(metrics["model_state_bytes"][0])
        peak = metrics["peak_memory_bytes"]
        print(
            f"ratio: {strategy:6s} 2 processes: {metrics['tokens_per_s']:8.1f} tokens/s "
            f"({metrics['tokens_per_s'] / base:.2f}x DDP) | planner: model states "
            f"{predicted.model_states / held - 1:+.1%} vs counted, peak "
            f"{predicted.total / peak - 1:+.1%} vs measured ({peak / 2**30:.2f} GiB)"
        )
        figures[f"{strategy}_vs_ddp"] = metrics["tokens_per_s"] / base
        figures[f"{strategy}_states_error"] = predicted.model_states / held - 1
        bounds |= {f"{strategy}_vs_ddp": (1e-9, 2.0), f"{strategy}_states_error": (-0.01, 0.01)}
    return judge(figures, bounds, args.bound)


if __name__ == "__main__":
    sys.exit(main())
