"""`accelstudy <stage> ...`: one subcommand per pipeline stage, as the Snakemake rules call them."""

import argparse
import json
import logging
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from accelstudy import timeline
from accelstudy.errors import StudyError, schema_error
from accelstudy.kinds import KINDS, kind_of
from accelstudy.options import argument, filled, node
from accelstudy.paths import PAPER
from accelstudy.points import DiffusionPoint, FinetunePoint
from accelstudy.strategies import STRATEGIES
from accelstudy.tasks import PROTOCOLS, SPLITS, TASKS


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc


def _spec(path: str) -> Callable[[str], Any]:
    """A config block given as JSON (a rule passes the study's), held to its schema with its
    defaults filled in: a value check-config would refuse is a usage error here too."""

    def parse(text: str) -> Any:
        import jsonschema

        value, block = _json(text), node(path)
        if errors := list(jsonschema.Draft202012Validator(block).iter_errors(value)):
            raise argparse.ArgumentTypeError(str(schema_error(errors, f"{path} key")))
        return filled(block, value)

    return parse


# a job's runs (`--runs`): each one's keys, which a rule writes (targets.StudyTargets.runs)
RUN_KEYS = {
    "baseline": ("task", "protocol", "data", "data_source", "settings", "limit", "out", "items"),
    "quantize": ("recipe", "out", "items"),
}
RUN_CHOICES = {"task": TASKS, "protocol": PROTOCOLS}
# a path given that names no readable (or makeable) file
PATH_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
               PermissionError)  # fmt: skip


def _runs(stage: str) -> Callable[[str], list[dict[str, Any]]]:
    """An argparse type: the JSON list of a job's runs, each with its stage's keys (and
    optionally its params digest), paths as paths; a task or protocol not known: a usage error."""

    def parse(text: str) -> list[dict[str, Any]]:
        runs, keys = _json(text), RUN_KEYS[stage]
        if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
            raise argparse.ArgumentTypeError("not a JSON list of runs (objects)")
        for i, run in enumerate(runs):
            if set(keys) != set(run) - {"params_digest"}:
                raise argparse.ArgumentTypeError(f"run {i} has keys {sorted(run)}; needs {keys}")
            for key, allowed in RUN_CHOICES.items():
                if key in run and run[key] not in allowed:
                    raise argparse.ArgumentTypeError(
                        f"run {i}: {key} {run[key]!r} is not one of {', '.join(allowed)}"
                    )
            run |= {key: Path(run[key]) for key in ("data", "out", "items") if key in run}
        return runs

    parse.__name__ = f"{stage} runs"
    return parse


def _positive(kind: type) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` above zero (cards, threads, GB, a budget)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0 or value == float("inf"):
            noun = "whole number" if kind is int else "number"
            raise argparse.ArgumentTypeError(f"{text!r} is not a {noun} above 0")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _check_config(configfile: Path) -> None:
    from accelstudy.study import load_study

    config = load_study(configfile)
    print(f"{configfile}: ok (study '{config['study']}')")
    if config["finetune"]["enabled"] and not config["finetune"]["skip_predicted_oom"]:
        from accelstudy.console import warn_host_overflow

        warn_host_overflow(config)


def _where_report(configfile: Path) -> None:
    from accelstudy.layout import StudyLayout
    from accelstudy.study import load_study

    config = load_study(configfile)
    index = Path(StudyLayout(config, config["system"]).path("report"))
    print(f"Report: {index} (Markdown: {index.with_name('report.md')})")


def _run_snakemake(argv: list[str]) -> None:
    from accelstudy.locks import run_snakemake

    if code := run_snakemake(Path.cwd(), argv):
        raise SystemExit(code)


def _probe(threads: list[int]) -> None:
    import os

    from accelstudy.peak import cpu_model_and_flags, probe

    model = cpu_model_and_flags()[0]
    for count in sorted(set(threads or [1, os.cpu_count() or 1])):
        rates = probe(count)["flops_per_s"]
        shown = ", ".join(f"{dtype} {rate / 1e9:.1f}" for dtype, rate in rates.items())
        print(f"{model}, {count} thread(s): {shown} GFLOP/s (GEMM probe, cached)")


def _device(kind: str) -> str:
    """An argparse type: `auto` or a registered device kind (accelstudy.kinds), read as parsed."""
    try:
        return kind if kind == "auto" else kind_of(kind).name
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} or auto") from None


# add_argument keywords of the options several subcommands share; a subcommand may amend them
SHARED: dict[str, dict[str, Any]] = {
    **{name: {"required": True} for name in
       ("study", "system", "model-name", "task", "data-source")},
    **{name: {"type": Path, "required": True} for name in ("configfile", "model-dir", "data",
       "out", "card", "table", "assignment", "samples")},
    **{name: {"type": _json, "required": True} for name in ("spec", "point", "bits", "settings")},
    "limit": argument("tasks.*.limit"),
    "seed": argument("seed"),
    "threads": {"type": _positive(int), "default": 1, "help": "cores of this job"},
    "device": {"default": "auto", "type": _device},
    "params-digest": {"help": "its rule's params digest, written into the record (the check of "
                              "a record against its study)"},
}  # fmt: skip
Option = str | tuple[str, dict[str, Any] | str]
# subcommand -> (help, what runs it: a function here or an accelstudy "module:function" taking the
# options, its options in --help order: a shared one, or one with its add_argument keywords or
# the config option whose type, default, allowed values and description it takes)
COMMANDS: dict[str, tuple[str, str | Callable[..., Any], list[Option]]] = {
    "check-config": ("validate a study config file", _check_config, ["configfile"]),
    "where-report": ("print where a study's report is", _where_report, ["configfile"]),
    "snakemake": ("remove the lock of a killed run of ours, then run the Snakemake command given",
        _run_snakemake, [("argv", {"positional": True, "nargs": argparse.REMAINDER})]),
    "prepare-model": ("find or convert a model; write its manifest", "models:prepare_model",
        [("spec", {"type": _spec("models.*"), "help": "the models.<name> config entry"}),
         "seed", "out"]),
    "prepare-data": ("load one split of a task; cache as JSON Lines", "data.sources:prepare_data",
        [("task", {"choices": TASKS}),
         ("spec", {"type": _spec("tasks.*"), "help": "the tasks.<name> config entry"}),
         ("split", {"required": True, "choices": SPLITS}), "out"]),
    "baseline": ("evaluate the unquantized model on every task and protocol given",
        "evaluate.baseline:baselines",
        ["study", "system", "model-name", "model-dir", "device",
         ("runs", {"type": _runs("baseline"), "required": True,
                   "help": "JSON list: each evaluation's task, protocol, data, data_source, "
                           "settings, limit, out (its record), items (per-item Parquet) and "
                           "optional params_digest"})]),
    "report": ("collect records into tables, figures and the report", "report.build:build_report",
        ["study", ("system", {"help": "whose records the sections show", "required": False}),
         ("records", {"type": Path, "nargs": "+", "required": True, "dest": "record_paths"}),
         ("sensitivity", {"type": Path, "nargs": "*", "default": [], "help": "gathered tables"}),
         ("assignments", {"type": Path, "nargs": "*", "default": [], "help": "bit assignments"}),
         ("calibration", {"type": _json, "default": {}, "help": "ptq.calibration_limit"}),
         ("bit-lists", {"type": _json, "default": [], "help": "ptq.bit_lists"}),
         ("results-dir", {"type": Path, "required": True, "help": "results/{study}"})]),
    "sensitivity": ("pruning sensitivity of one chunk of targets",
        "ptq.sensitivity:sensitivity_chunk",
        ["model-dir", "task", ("data", {"help": "the calibration split"}), "limit", "settings",
         ("granularity", "ptq.granularity"), ("family", "ptq.family"), ("sparsity", "ptq.sparsity"),
         ("chunks", "ptq.chunks"), ("chunk", {"type": int, "required": True}),
         ("prefix-reuse", "ptq.prefix_reuse"), ("device", {"choices": None}), "out"]),
    "gather-sensitivity": ("chunks -> one sensitivity table", "ptq.clustering:gather_sensitivity",
        [("chunks", {"type": Path, "nargs": "+", "required": True}), "out"]),
    "cluster": ("sensitivity table -> layer-to-bits map", "ptq.clustering:cluster",
        ["table", "bits", ("method", "ptq.clustering"), ("remainder", "ptq.remainder"),
         "model-dir", "out"]),
    "quantize": ("quantize per an assignment under each recipe given, and evaluate",
        "ptq.quantize:quantize_recipes",
        ["study", "system", "model-name", "task", "data-source", "model-dir", "data",
         "settings", "limit", "assignment", ("group-size", "ptq.group_size"),
         ("symmetric", "ptq.symmetric"),
         ("calibration", {"type": Path, "help": "calibration split (FP8 MEASURE pass)"}),
         ("fp8-format", "ptq.fp8_format"), ("fp8-without-hpu", "ptq.fp8_without_hpu"),
         ("device", {"choices": None}),
         ("runs", {"type": _runs("quantize"), "required": True,
                   "help": "JSON list: each recipe's recipe, out (its record), items (per-item "
                           "Parquet) and optional params_digest"})]),
    "prepare-instructions": ("instruction data for fine-tuning, cached",
        "data.instructions:prepare_instructions",
        [("spec", {"type": _spec("finetune.data"), "help": "the finetune.data config entry"}),
         "out"]),
    "finetune": ("plan, launch and record one fine-tuning point", "finetune.job:run",
        ["study", "system", "model-name", "data-source", "model-dir",
         ("point", {"type": FinetunePoint.from_json, "help": "the point (finetune keys)"}),
         "threads", "device", "out", "params-digest"]),
    "probe": ("measure this CPU's GEMM FLOP/s per dtype (its peak, cached); run it alone", _probe,
        [("threads", {"type": _positive(int), "nargs": "*", "default": [],
                      "help": "thread counts (default: 1 and every core)"})]),
    "plan-memory": ("predict a point's per-card peak memory", "console:print_memory",
        [("model", {"required": True, "help": "a model directory or resources/models name"}),
         ("strategy", {"required": True, "choices": STRATEGIES}),
         ("cards", {"type": _positive(int), "default": 1}), ("method", "finetune.method"),
         ("dtype", {"default": "bfloat16", "choices": ["bfloat16", "float32"]}),
         ("batch", "finetune.per_device_batch"), ("seq-len", "finetune.max_seq_length"),
         ("attention", {"default": "fused", "choices": ["fused", "eager"]}),
         ("device", {"default": "cuda", "choices": KINDS}),
         ("memory-per-card-gb", {"type": _positive(float), "help": "say whether it fits"})]),
    "plan-fit": ("the points each system holds out for memory", "console:print_fit",
        ["configfile", ("system", {"nargs": "*", "default": [], "required": False,
                                   "help": "config/systems names (default: all)"}),
         ("every-point", {"action": "store_true", "help": "list the points that fit too"}),
         ("format", {"choices": ["table", "csv", "json"], "default": "table",
                     "help": "table: each system's count first; csv, json: every point"})]),
    "plan-time": ("each point's wall time, node-hours, charge and energy before it runs",
        "console:print_time",
        ["configfile", ("system", {"nargs": "*", "default": [], "required": False,
                                   "help": "config/systems names (default: the config's)"}),
         ("budget", {"type": _positive(float), "help": "an allocation in the site's units"}),
         ("dry-run", {"flags": ["-n", "--dry-run"], "action": "store_true",
                      "help": "per job, only those Snakemake would run now"}),
         ("format", {"choices": ["table", "csv", "json"], "default": "table",
                     "help": "table: the totals first, then the rows; csv: the rows; json: all"}),
         ("by", {"choices": ["point", "rule"], "default": "point",
                 "help": "a row per point (repeats summed) or per rule"})]),
    "recommend": ("what to run where: fit map, fastest/cheapest/least-energy, sharding rule",
        "console:print_recommendation",
        [("model", {"help": "a finetune.models name of the config (default: each)"}),
         ("system", {"required": True, "help": "a config/systems name"}),
         ("configfile", {"default": PAPER, "required": False,  # the installed copy's too
                         "help": "the study (default: the published one, config/paper.yaml)"}),
         ("results", {"type": Path, "nargs": "*", "default": [],
                      "help": "results/<study> folders whose measurements to use"}),
         ("format", {"choices": ["table", "csv", "json"], "default": "table",
                     "help": "table: per model, its summary first; csv: every point's fit map; "
                             "json: all"})]),
    "prepare-dust": ("dust images from PySM3, paired high/low-res", "data.dust:prepare_dust",
        [("spec", {"type": _spec("diffusion.data"), "help": "the diffusion.data config entry"}),
         "seed",
         ("out", {"help": "the pairs (npz)"}), ("card", {"help": "the data card (JSON)"})]),
    "diffusion": ("launch and record one SR3 strong-scaling point", "diffusion.job:run",
        ["study", "system",
         ("point", {"type": DiffusionPoint.from_json, "help": "the point (diffusion keys)"}),
         "data", "card", "out", "samples", "threads", "device", "params-digest"]),
    "compare": ("one report across systems from several runs' results", "report.compare:compare",
        [("runs", {"positional": True, "type": Path, "nargs": "+",
                   "help": "results/<study> folders, one per run"}),
         ("out", {"help": "the comparative report's folder"}),
         ("reference", {"help": "the system ratios are taken against (default: the first)"})]),
}  # fmt: skip


class Parser(argparse.ArgumentParser):
    """A bad command line as one line on stderr and exit status 2, as any bad input; no option
    abbreviated (`--config k=v` is never `--configfile`)."""

    def error(self, message: str) -> NoReturn:
        if "--config" in message.split():
            message += "; only snakemake takes --config: put those keys in the --configfile file"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="accelstudy", description=__doc__, allow_abbrev=False)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, (text, _, options) in COMMANDS.items():
        p = sub.add_parser(command, help=text, allow_abbrev=False)
        for option in options:
            name, amended = (option, {}) if isinstance(option, str) else option
            amended = argument(amended) if isinstance(amended, str) else amended
            keywords = {**SHARED.get(name, {}), **amended}
            positional = keywords.pop("positional", False)
            flags = keywords.pop("flags", [name if positional else f"--{name}"])
            p.add_argument(*flags, **keywords)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Call the subcommand's function (imported only now: a subcommand loads only what it uses)
    with its options as keywords, --device as device_kind."""
    if argv is None:  # a program (not a call in-process)
        timeline.starting()
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    options = {k: v for k, v in vars(args).items() if k not in ("command", "verbose")}
    if "device" in options:
        options["device_kind"] = options.pop("device")
    target = COMMANDS[args.command][1]
    try:
        if isinstance(target, str):
            target = pkgutil.resolve_name(f"accelstudy.{target}")
        if argv is None:  # its start-up until now is imports
            timeline.imported()
        if isinstance(report := target(**options), Path):  # a report's index: say where
            print(report)
    except StudyError as exc:
        print(f"accelstudy {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except PATH_ERRORS as exc:
        problem = f"{exc.strerror}: '{exc.filename}'"
        print(f"accelstudy {args.command}: error: {problem}", file=sys.stderr)
        return 2
    if argv is None:  # exiting: what the stage made is not worth a last collection either
        timeline.settled()
    return 0
