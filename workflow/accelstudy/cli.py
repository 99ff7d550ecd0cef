"""`accelstudy <stage> ...`: one subcommand per pipeline stage, as the Snakemake rules call them."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from accelstudy.config import ConfigError


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc


def _optional_int(text: str) -> int | None:
    return None if text in {"None", "null", ""} else int(text)


def _add_config_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-config", help="validate a study config file")
    p.add_argument("--configfile", type=Path, required=True)
    p = sub.add_parser("where-report", help="print where a study's report is")
    p.add_argument("--configfile", type=Path, required=True)
    sub.add_parser("unlock-if-stale", help="remove the lock a killed Snakemake run left here")


def _add_prepare_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare-model", help="load a model from its source; save safetensors")
    p.add_argument("--spec", type=_json, required=True, help="the models.<name> config entry")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("prepare-data", help="load one split of a task; cache as JSON Lines")
    p.add_argument("--task", required=True, choices=["wikitext", "hellaswag", "boolq"])
    p.add_argument("--spec", type=_json, required=True, help="the tasks.<name> config entry")
    p.add_argument("--split", required=True, choices=["train", "validation", "test"])
    p.add_argument("--out", type=Path, required=True)


def _add_finetune_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare-instructions", help="instruction data for fine-tuning, cached")
    p.add_argument("--spec", type=_json, required=True, help="the finetune.data config entry")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("finetune", help="plan, launch and record one fine-tuning point")
    for name in ("study", "system", "model-name", "data-source"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("--point", type=_json, required=True, help="the point (finetune keys)")
    p.add_argument("--threads", type=int, default=1, help="cores of this job")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "hpu"])
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("plan-memory", help="predict a point's per-card peak memory")
    p.add_argument("--model", required=True, help="a model directory or resources/models name")
    p.add_argument("--strategy", required=True, choices=["ddp", "zero3", "fsdp"])
    p.add_argument("--cards", type=int, default=1)
    p.add_argument("--method", default="lora", choices=["lora", "full"])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--attention", default="fused", choices=["fused", "eager"])
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda", "hpu"])
    p.add_argument("--memory-per-card-gb", type=float, help="say whether it fits")


def _run_finetune(args: argparse.Namespace) -> None:
    if args.command == "prepare-instructions":
        from accelstudy.data.instructions import prepare_instructions

        prepare_instructions(args.spec, args.out)
    elif args.command == "finetune":
        from accelstudy.finetune.stages import finetune_point

        finetune_point(
            study=args.study, system=args.system, model_name=args.model_name,
            model_dir=args.model_dir, point=args.point, data_source=args.data_source,
            threads=args.threads, out=args.out, device_kind=args.device,
        )  # fmt: skip
    else:
        from accelstudy.finetune.planner import plan_point

        plan = plan_point(
            args.model, strategy=args.strategy, cards=args.cards, method=args.method,
            dtype=args.dtype, batch=args.batch, seq_len=args.seq_len, attention=args.attention,
            device=args.device,
        )  # fmt: skip
        for key, value in plan.as_dict().items():
            print(f"{key:>13s} {value / 2**30:9.2f} GiB")
        if args.memory_per_card_gb:
            verdict = "fits" if plan.fits(args.memory_per_card_gb) else "does not fit"
            print(f"{verdict} a {args.memory_per_card_gb:g} GB card")


def _add_diffusion_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare-dust", help="dust images from PySM3, paired high/low-res")
    p.add_argument("--spec", type=_json, required=True, help="the diffusion.data config entry")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="the pairs (npz)")
    p.add_argument("--card", type=Path, required=True, help="the data card (JSON)")
    p = sub.add_parser("diffusion", help="launch and record one SR3 strong-scaling point")
    p.add_argument("--study", required=True)
    p.add_argument("--system", required=True)
    p.add_argument("--point", type=_json, required=True, help="the point (diffusion keys)")
    for name in ("data", "card", "out", "samples"):
        p.add_argument(f"--{name}", type=Path, required=True)
    p.add_argument("--threads", type=int, default=1, help="cores of this job")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "hpu"])


def _run_diffusion(args: argparse.Namespace) -> None:
    if args.command == "prepare-dust":
        from accelstudy.data.dust import prepare_dust

        prepare_dust(args.spec, args.seed, args.out, args.card)
    else:
        from accelstudy.diffusion.stages import diffusion_point

        diffusion_point(
            study=args.study, system=args.system, point=args.point, data=args.data,
            card=args.card, threads=args.threads, out=args.out, samples=args.samples,
            device_kind=args.device,
        )  # fmt: skip


def _add_eval_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="evaluate the unquantized model on one task")
    for name in ("study", "system", "model-name", "task", "data-source"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--protocol", required=True, choices=["paper", "lm-eval"])
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--settings", type=_json, required=True, help="the evaluation config block")
    p.add_argument("--limit", type=_optional_int, default=None)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "hpu"])
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("report", help="collect records into tables, figures and the report")
    p.add_argument("--study", required=True)
    p.add_argument("--records", type=Path, nargs="+", required=True)
    p.add_argument("--sensitivity", type=Path, nargs="*", default=[], help="gathered tables")
    p.add_argument("--assignments", type=Path, nargs="*", default=[], help="bit assignments")
    p.add_argument("--calibration", type=_json, default={}, help="ptq.calibration_limit")
    p.add_argument("--bit-lists", type=_json, default=[], help="ptq.bit_lists")
    p.add_argument("--results-dir", type=Path, required=True, help="results/{study}")


def _add_ptq_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sensitivity", help="pruning sensitivity of one chunk of targets")
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--data", type=Path, required=True, help="the calibration split")
    p.add_argument("--limit", type=_optional_int, default=None)
    p.add_argument("--settings", type=_json, required=True)
    p.add_argument("--granularity", required=True)
    p.add_argument("--family", default="mlp")
    p.add_argument("--sparsity", type=float, required=True)
    p.add_argument("--chunks", type=int, required=True)
    p.add_argument("--chunk", type=int, required=True)
    p.add_argument("--prefix-reuse", type=_json, default=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("gather-sensitivity", help="chunks -> one sensitivity table")
    p.add_argument("--chunks", type=Path, nargs="+", required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("cluster", help="sensitivity table -> layer-to-bits map")
    p.add_argument("--table", type=Path, required=True)
    p.add_argument("--bits", type=_json, required=True)
    p.add_argument("--method", default="percentile")
    p.add_argument("--remainder", default="last")
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("quantize", help="quantize per an assignment and evaluate")
    for name in ("study", "system", "model-name", "task", "data-source", "recipe"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--settings", type=_json, required=True)
    p.add_argument("--limit", type=_optional_int, default=None)
    p.add_argument("--assignment", type=Path, required=True)
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--symmetric", type=_json, default=True)
    p.add_argument("--calibration", type=Path, help="calibration split (FP8 MEASURE pass)")
    p.add_argument("--fp8-format", default="e4m3", choices=["e4m3", "e5m2"])
    p.add_argument("--fp8-without-hpu", default="standin", choices=["standin", "error"])
    p.add_argument("--device", default="auto")
    p.add_argument("--out", type=Path, required=True)


def _run_ptq(args: argparse.Namespace) -> None:
    from accelstudy.ptq import stages as ptq

    if args.command == "sensitivity":
        ptq.sensitivity_chunk(
            model_dir=args.model_dir, task=args.task, data=args.data, limit=args.limit,
            settings=args.settings, granularity=args.granularity, family=args.family,
            sparsity=args.sparsity, chunks=args.chunks, chunk=args.chunk,
            prefix_reuse=args.prefix_reuse, out=args.out, device_kind=args.device,
        )  # fmt: skip
    elif args.command == "gather-sensitivity":
        ptq.gather_sensitivity(args.chunks, args.out)
    elif args.command == "cluster":
        n_layers = json.loads((args.model_dir / "config.json").read_text())["num_hidden_layers"]
        ptq.cluster(
            table=args.table, bits=args.bits, method=args.method, remainder=args.remainder,
            n_layers=n_layers, out=args.out,
        )  # fmt: skip
    elif args.command == "quantize":
        ptq.quantized_eval(
            study=args.study, system=args.system, model_name=args.model_name,
            model_dir=args.model_dir, task=args.task, data=args.data,
            data_source=args.data_source, settings=args.settings, limit=args.limit,
            assignment=args.assignment, recipe=args.recipe, group_size=args.group_size,
            symmetric=args.symmetric, out=args.out, device_kind=args.device,
            calibration=args.calibration, fp8_format=args.fp8_format,
            fp8_without_hpu=args.fp8_without_hpu,
        )  # fmt: skip


PTQ_COMMANDS = {"sensitivity", "gather-sensitivity", "cluster", "quantize"}
FINETUNE_COMMANDS = {"prepare-instructions", "finetune", "plan-memory"}
DIFFUSION_COMMANDS = {"prepare-dust", "diffusion"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accelstudy", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_config_commands(sub)
    _add_prepare_commands(sub)
    _add_eval_commands(sub)
    _add_ptq_commands(sub)
    _add_finetune_commands(sub)
    _add_diffusion_commands(sub)
    return parser


def run(args: argparse.Namespace) -> None:
    from accelstudy import stages

    if args.command in PTQ_COMMANDS:
        _run_ptq(args)
    elif args.command in FINETUNE_COMMANDS:
        _run_finetune(args)
    elif args.command in DIFFUSION_COMMANDS:
        _run_diffusion(args)
    elif args.command == "check-config":
        from accelstudy.config import load_config

        config = load_config(args.configfile)
        print(f"{args.configfile}: ok (study '{config['study']}')")
    elif args.command == "where-report":
        from accelstudy.config import load_config

        config = load_config(args.configfile)
        root = Path(config["results_dir"]) / config["study"] / "report"
        print(f"Report: {root / 'index.html'} (Markdown: {root / 'report.md'})")
    elif args.command == "prepare-model":
        stages.prepare_model(args.spec, args.out, args.seed)
    elif args.command == "prepare-data":
        stages.prepare_data(args.task, args.spec, args.split, args.out)
    elif args.command == "baseline":
        stages.baseline(
            study=args.study, system=args.system, model_name=args.model_name,
            model_dir=args.model_dir, task=args.task, protocol=args.protocol, data=args.data,
            data_source=args.data_source, settings=args.settings, limit=args.limit,
            out=args.out, device_kind=args.device,
        )  # fmt: skip
    elif args.command == "report":
        from accelstudy.report import build_report

        print(
            build_report(
                args.study, args.records, args.results_dir, sensitivity=args.sensitivity,
                assignments=args.assignments, calibration=args.calibration,
                bit_lists=args.bit_lists,
            )
        )  # fmt: skip
    elif args.command == "unlock-if-stale":
        from accelstudy.locks import unlock_if_stale

        print(unlock_if_stale(Path.cwd()), end="")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    from accelstudy.data.dust import DustDataError
    from accelstudy.data.sources import DataSourceError
    from accelstudy.finetune.sweep import SweepError
    from accelstudy.launch import PointFailed
    from accelstudy.locks import LockHeldError
    from accelstudy.models import ModelSourceError
    from accelstudy.ptq.stages import RecipeDeviceError, SensitivityTableError

    try:
        run(args)
    except (
        ConfigError,
        DataSourceError,
        ModelSourceError,
        SensitivityTableError,
        RecipeDeviceError,
        LockHeldError,
        PointFailed,
        SweepError,
        DustDataError,
    ) as exc:
        print(f"accelstudy {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
