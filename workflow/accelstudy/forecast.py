"""How long each job of a study will run on a system, and what it will charge, before one is
submitted: what allocation proposals (NERSC's ERCAP, ACCESS) ask to be justified.

A job's time is its start-up, its warm-up and its work (FLOPs: accelstudy.flops, SR3's as torch
counted them) over an achieved FLOP/s. The rate comes, in order, from this system's records of
the same kind (`measured`: same model and cards; `scaled`: FLOP/s carries it across models, and
(cards/c0)^e across card counts, e fitted from the card counts the records hold), else from
what the paper published for the system's accelerator in the job's dtype (`published`: its SR3
minutes, its evaluation rates, carried the same way, e fitted from its own card counts), else
from resources/assumed_rates.csv (`assumed`: a fraction of the system file's peak, never called
a measurement). Start-up and warm-up come from the records' provenance.timeline (a published
whole job's are inside its minutes), else from the assumption's start-up and model-load rate.
Imports neither torch nor transformers: the rules ask it for every job's SLURM runtime while
Snakemake parses the workflow."""

import csv
import dataclasses
import functools
import inspect
import json
import math
import statistics
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

from accelstudy import flops, models, points
from accelstudy.cost import Allocation, charged
from accelstudy.layout import OUTPUTS, STAGE_RULE, StudyLayout, record_files
from accelstudy.paths import RESOURCES
from accelstudy.peak import resolve_dtype
from accelstudy.pruning import chunk_sizes, targets_per_layer
from accelstudy.snapshots import config_folder
from accelstudy.systems import System, every_system
from accelstudy.tasks import TASKS

MARGIN = 1.5  # a job's SLURM time limit: its forecast times this, times the attempt
MIN_MINUTES = 10  # never below: a queue's start-up noise must not kill a short job
UNKNOWN_MINUTES = 24 * 60  # no forecast (no FLOP count): the partition's limit, else a day
FAMILY = {"finetune": "finetune", "diffusion": "diffusion", "baseline": "evaluate"}
FAMILY |= {"quantize": "evaluate", "sensitivity": "evaluate"}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# the config keys accelstudy.flops counts a decoder from, each by tiny_random_llama's name for it
COUNTED = {"hidden_size": "hidden", "intermediate_size": "intermediate", "vocab_size": "vocab"}
COUNTED |= {"num_hidden_layers": "layers", "num_attention_heads": "heads"}
# the paper's SR3 run (resources/diffusion_minutes.csv): iterations x devices = 40,000 at 4
# images per device, in float32 (Janspiry's SR3 and the authors' ports train in float32)
PAPER_SR3: dict[str, Any] = {
    "inner_channels": 128,
    "channel_multipliers": [1, 2, 4, 4, 8, 8],
    "res_blocks": 3,
}
PAPER_SR3 |= {"attention_resolutions": [16], "hr_size": 256, "images": 40_000 * 4}


@dataclass(frozen=True)
class Work:
    """One job: what shares its rate (`kind`), its cards, and its FLOPs by phase."""

    rule: str
    output: str
    model: str
    kind: tuple[str, ...]
    cards: int
    dtype: str
    timed_flops: float | None  # the measured window's work (None: no FLOP count)
    warm_flops: float = 0.0  # the warm-up steps before it
    load_bytes: float = 0.0  # the weights start-up reads

    @property
    def family(self) -> str:
        return FAMILY[self.rule]

    @property
    def point(self) -> str:
        """The job without its repeat (a sweep point's repeats share a folder): the plan's row."""
        return str(Path(self.output).parent) if "{repeat}" in OUTPUTS[self.rule] else self.output


@dataclass(frozen=True)
class Seen:
    """One record's timing: its achieved FLOP/s over the measured window and its phases."""

    work: Work
    rate: float
    startup_s: float | None  # process start to model and data ready
    warm_s: float | None
    tail_s: float | None  # after the measured window: the record, checks, samples
    wall_s: float | None  # the whole process (what Snakemake ran)


@dataclass(frozen=True)
class Estimate:
    work: Work
    seconds: float | None
    rate: float | None
    source: str  # measured, scaled, assumed, unknown
    basis: str

    def minutes(self, attempt: int, limit: int | None) -> int:
        """The SLURM runtime: forecast x MARGIN x attempt, within [MIN_MINUTES, limit]."""
        if self.seconds is None:  # no forecast: the longest the partition takes
            return limit or UNKNOWN_MINUTES * attempt
        minutes = max(MIN_MINUTES, math.ceil(self.seconds * MARGIN / 60)) * attempt
        return min(minutes, limit) if limit else minutes


# the work of a job, from its config and wildcards -----------------------------------------------
@functools.cache
def _csv(name: str) -> tuple[dict[str, str], ...]:
    with (RESOURCES / name).open() as file:
        return tuple(csv.DictReader(file))


def decoder_sizes(config: Mapping[str, Any], model: str) -> dict[str, Any] | None:
    """resources/models/<name>/config.json (shipped: the paper's models and the default's), a
    tiny random model's sizes, else the prepared model's; None before it is prepared."""
    spec = config["models"].get(model, {})
    if spec.get("source") == "tiny-random":  # tiny_random_llama's sizes, as the spec sets them
        defaults = inspect.signature(models.tiny_random_llama).parameters.items()
        tiny = {name: p.default for name, p in defaults} | spec.get("tiny", {})
        sizes = {name: tiny[key] for name, key in COUNTED.items()}
        return sizes | {"num_key_value_heads": tiny["kv_heads"]}
    if (folder := config_folder(config, model)) is None:
        return None
    found = json.loads((folder / "config.json").read_text())
    return found if set(found) >= set(COUNTED) else None  # a decoder flops.py can count


def parameters(model: Mapping[str, Any]) -> int:
    """Weights of a decoder from its config: the layers' linears and the embeddings."""
    per_layer = sum(i * o for i, o in flops.linear_shapes(model).values())
    embeddings = model["vocab_size"] * model["hidden_size"]
    tied = model.get("tie_word_embeddings", True)
    return model["num_hidden_layers"] * per_layer + embeddings * (1 if tied else 2)


def split_tokens(task: Mapping[str, Any], name: str, split: str, limit: int | None) -> float:
    """Tokens an evaluation reads of a split: resources/splits.csv's items (up to the limit)
    times its tokens per item (a block's, or every choice's)."""
    source = "standin" if task.get("source") == "standin" else "hf"
    for row in _csv("splits.csv"):
        if (row["task"], row["split"], row["source"]) == (name, split, source):
            items = int(row["items"]) if limit is None else min(limit, int(row["items"]))
            return items * float(row["tokens_per_item"])
    return math.nan  # a split resources/splits.csv does not size (a local file)


def sr3_flops(model: Mapping[str, Any], hr_size: int) -> float | None:
    """A training step's FLOPs per image for this SR3 shape, as torch counted them."""
    shape = [str(model["inner_channels"]), "-".join(map(str, model["channel_multipliers"]))]
    shape += ["-".join(map(str, model["attention_resolutions"])), str(model["res_blocks"])]
    keys = ("inner_channels", "channel_multipliers", "attention_resolutions", "res_blocks")
    for row in _csv("sr3_flops.csv"):
        if [row[k] for k in keys] == shape and int(row["hr_size"]) == hr_size:
            return float(row["flops_per_image"])
    return None


def _dtype(asked: str, system: System) -> str:
    """`auto` as a job resolves it (peak.resolve_dtype, as `plan-fit` does): a card's offer, a
    CPU's probe at one thread per point's process."""
    return resolve_dtype(asked, system, system.device, 1)[0]


def point_work(
    point: points.FinetunePoint | points.DiffusionPoint,
    output: str,
    model: str,
    dtype: str,
    per_unit: float | None,
    load_bytes: float = 0.0,
) -> Work:
    """A sweep point's job: its timed steps' and warm-up steps' units (tokens, images) times
    the FLOPs per unit; None: not counted."""
    kind: tuple[str, ...]
    if isinstance(point, points.FinetunePoint):
        rule, kind, cards = "finetune", (point.strategy, point.attention), point.cards
        per_step = point.samples_per_step * point.max_seq_length * cards
        warm = min(point.throughput_warmup_steps, point.max_steps)
        steps = point.max_steps - warm
    else:  # SR3's strong scaling: iterations x devices fixed
        rule, kind, cards = "diffusion", ("sr3",), point.devices
        per_step, warm = point.batch_per_device * cards, point.warmup_iterations
        steps = point.iterations_per_device - warm
    if per_unit is None:
        return Work(rule, output, model, kind, cards, dtype, None)
    timed, warm_flops = steps * per_step * per_unit, warm * per_step * per_unit
    return Work(rule, output, model, kind, cards, dtype, timed, warm_flops, load_bytes)


def _evaluation(rule: str, w: Any, output: str, config: Mapping[str, Any]) -> Work:
    """A baseline or quantized evaluation over its split, or a sensitivity chunk: every target
    of the chunk pruned in turn, and the unpruned model, each over the calibration data."""
    task, evaluation = config["tasks"][w.task], config["evaluation"]
    model = decoder_sizes(config, w.model)
    passes, split, limit = 1, task["eval_split"], task.get("limit")
    if rule == "sensitivity":
        split, limit = TASKS[w.task].calibration_split, config["ptq"]["calibration_limit"][w.task]
        passes = scan_passes(config["ptq"], w, model["num_hidden_layers"] if model else 0)
    kind, dtype = (w.task, getattr(w, "protocol", "paper")), evaluation["dtype"]
    tokens = passes * split_tokens(task, w.task, split, limit)
    if model is None or math.isnan(tokens):
        return Work(rule, output, w.model, kind, 1, dtype, None)
    perplexity = TASKS[w.task].kind == "perplexity"
    length = evaluation["block_size"] if perplexity else 256  # else a typical item's
    timed = tokens * flops.forward_per_token(model, length)
    return Work(rule, output, w.model, kind, 1, dtype, timed, 0.0,
                parameters(model) * DTYPE_BYTES[dtype])  # fmt: skip


def scan_passes(ptq: Mapping[str, Any], w: Any, layers: int) -> int:
    """A sensitivity chunk's forward passes: each of its targets pruned, and the unpruned model."""
    targets = layers * targets_per_layer(w.granularity, ptq["family"])
    return chunk_sizes(targets, ptq["chunks"])[int(w.chunk)] + 1


def work_of(rule: str, w: Any, output: str, config: Mapping[str, Any], system: System) -> Work:
    """The job of `rule` with wildcards `w` (a Snakemake job's, or one the plan builds)."""
    if rule == "diffusion":
        sr3 = points.diffusion_point(config, w)
        per_image = sr3_flops(sr3.model, config["diffusion"]["data"]["hr_size"])
        return point_work(sr3, output, "sr3", _dtype(sr3.dtype, system), per_image)
    if rule != "finetune":
        return _evaluation(rule, w, output, config)
    point, model = points.finetune_point(config, w, data_file=""), decoder_sizes(config, w.model)
    dtype = _dtype(point.dtype, system)
    if model is None:
        return point_work(point, output, w.model, dtype, None)
    lora = (point.lora.rank, point.lora.targets) if point.method == "lora" else (0, ())
    per_token = flops.training_per_token(model, point.max_seq_length, *lora)
    loads = parameters(model) * DTYPE_BYTES.get(dtype, 4)
    return point_work(point, output, w.model, dtype, per_token, loads)


# this system's records ------------------------------------------------------------------------
def _fields_of(point: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """A record's parameters that are the point's fields (it keeps others: its data file)."""
    return {f.name: values[f.name] for f in dataclasses.fields(point) if f.name in values}


def work_from_record(record: Mapping[str, Any], path: str) -> Work | None:
    """The work a record's job was given (its parameters and FLOP count, known before it ran)."""
    rule = STAGE_RULE.get(record.get("stage", ""), record.get("stage", ""))
    if rule not in FAMILY:
        return None
    p, m = record.get("parameters", {}), record.get("metrics", {})
    dtype = (record.get("utilization") or {}).get("dtype") or p.get("dtype", "float32")
    if rule == "finetune":
        ran = points.FinetunePoint.from_dict(_fields_of(points.FinetunePoint, p))
        return point_work(ran, path, record["model"], dtype, m.get("flops_per_token") or 0.0)
    if rule == "diffusion":
        sr3 = points.DiffusionPoint.from_dict(_fields_of(points.DiffusionPoint, p))
        return point_work(sr3, path, "sr3", dtype, m.get("flops_per_image") or 0.0)
    work = m.get("tokens", 0) * (m.get("flops_per_token") or 0.0)
    kind = (record.get("task", ""), record.get("protocol") or "paper")
    return Work(rule, path, record["model"], kind, 1, dtype, work)


def seen_in(paths: Iterable[str | Path]) -> list[Seen]:
    """Each record that ran to the end: its achieved FLOP/s over the measured window, phases."""
    seen = []
    for path in map(str, paths):
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue  # a record being written: the next parse reads it
        metrics, times = record.get("metrics", {}), record.get("provenance", {}).get("timeline", {})
        try:
            work = work_from_record(record, path)
        except (KeyError, TypeError, ValueError):
            continue  # a record without its parameters (an older schema's, a test's)
        if work is None or metrics.get("status", "ok") != "ok" or "end_s" not in times:
            continue  # a hole (held out, unsupported, out of memory), or no timeline
        ready = times.get("ready_s", 0.0)
        measured, done = times.get("measured_s", ready), times.get("done_s", times["end_s"])
        if work.timed_flops and done > measured:
            phases = (ready, measured - ready, times["end_s"] - done, times["end_s"])
            seen.append(Seen(work, work.timed_flops / (done - measured), *phases))
    return seen


# what the paper published -------------------------------------------------------------------
class Figure(NamedTuple):
    """A published timing as a record of its job: `seen.startup_s` 0 where its time is the whole
    job's (start-up inside), None where it is the work's alone."""

    device: str
    seen: Seen
    where: str


@functools.cache
def published_figures() -> tuple[Figure, ...]:
    """Every published timing: SR3's minutes per accelerator and count (the whole 40,000
    iterations x devices), and the evaluations' (resources/published_rates.csv)."""
    out, paper = [], PAPER_SR3
    per_image = sr3_flops(paper, paper["hr_size"]) or math.nan
    for row in _csv("diffusion_minutes.csv"):
        cards, seconds = int(row["devices"]), float(row["minutes"]) * 60
        label = f"SR3 on {cards} {row['device']}"
        done = paper["images"] * per_image
        work = Work("diffusion", label, "sr3", ("sr3",), cards, "float32", done)
        seen = Seen(work, done / seconds, 0.0, None, 0.0, seconds)
        out.append(Figure(row["device"], seen, "the paper's SR3 minutes"))
    for row in _csv("published_rates.csv"):
        model = json.loads((RESOURCES / "models" / row["model"] / "config.json").read_text())
        done = float(row["tokens"]) * flops.forward_per_token(model, int(row["length"]))
        label = f"{row['rule']} {row['task']} on 1 {row['device']}"
        loads = parameters(model) * DTYPE_BYTES[row["dtype"]]
        work = Work(row["rule"], label, row["model"], (row["task"], "paper"), 1, row["dtype"],
                    done, 0.0, loads)  # fmt: skip
        whole, seconds = row["whole_job"] == "true", float(row["seconds"])
        seen = Seen(work, done / seconds, 0.0 if whole else None, None, 0.0, seconds)
        out.append(Figure(row["device"], seen, row["where"]))
    return tuple(out)


# the rate, start-up and warm-up of a job ------------------------------------------------------
def _assumption(system: System, work: Work) -> dict[str, str] | None:
    ours = (system.device, work.family)
    here = [row for row in _csv("assumed_rates.csv") if (row["device"], row["family"]) == ours]
    return next((row for row in here if row["strategy"] in ("", work.kind[0])), None)


def card_exponent(seen: Iterable[Seen]) -> float | None:
    """How throughput grows with cards: the median over pairs of one kind and model measured at
    two card counts of log(rate ratio) / log(card ratio); None without such a pair."""
    slopes, seen = [], list(seen)
    for a in seen:
        for b in seen:
            same = (a.work.kind, a.work.model) == (b.work.kind, b.work.model)
            if same and a.work.cards < b.work.cards:
                slopes.append(math.log(b.rate / a.rate) / math.log(b.work.cards / a.work.cards))
    return statistics.median(slopes) if slopes else None


def _peak(system: System, dtype: str, cards: int) -> float | None:
    """The dtype's dense peak of `cards` cards as a job's record would take it (peak.peak): the
    datasheet's, or the CPU's cached probe at one thread a rank; none before a job names its
    card (a `by-device-name` system) or where no probe is cached."""
    from accelstudy.peak import peak

    limit = peak(system, system.device, dtype, cards, 1, probe_if_missing=False)
    return limit.get("flops_per_s")


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def estimate(
    work: Work, seen: list[Seen], system: System, published: Iterable[Figure] | None = None
) -> Estimate:
    """The job's wall time from this system's records (measured or scaled), else from what the
    paper published for its accelerator (`published`: resources/ unless given), else assumed."""
    family = [s for s in seen if s.work.family == work.family]
    assumed = _assumption(system, work) or {}
    if work.timed_flops is None:
        return Estimate(work, None, None, "unknown", "no FLOP count for this job's model")
    told = "record(s)"
    if not family:  # the paper's figures for this accelerator and dtype, as records
        figures = published_figures() if published is None else published
        ours = (system.accelerator, work.family, work.dtype)
        family = [f.seen for f in figures
                  if (f.device, f.seen.work.family, f.seen.work.dtype) == ours]  # fmt: skip
        told = f"published {system.accelerator} figure(s)"
    alike = [s for s in family if s.work.kind == work.kind]
    same = alike or family
    if same:
        nearest = min(same, key=lambda s: abs(math.log(s.work.cards / work.cards)))
        at = [s.rate for s in same if s.work.cards == nearest.work.cards]
        exponent = card_exponent(family)
        exponent = float(assumed.get("card_exponent", 1.0)) if exponent is None else exponent
        rate = statistics.median(at) * (work.cards / nearest.work.cards) ** exponent
        exact = nearest.work.cards == work.cards and nearest.work.kind == work.kind
        source = "measured" if exact and nearest.work.model == work.model else "scaled"
        source = source if told == "record(s)" else "published"
        what = "/".join(work.kind) if alike else f"other {work.family} kinds"
        basis = f"{len(at)} {told} of {what} on {nearest.work.cards}"
        basis += "" if nearest.work.cards == work.cards else f", cards^{exponent:.2f}"
        like = [s for s in same if s.work.model == work.model] or same
        startup, tail = _median(s.startup_s for s in like), _median(s.tail_s for s in like)
        if startup is None and assumed:  # a published rate of the work alone
            startup = float(assumed["startup_s"]) + _loading(work, assumed)
        warm = _median(
            (s.warm_s or 0.0) * s.rate / s.work.warm_flops for s in family if s.work.warm_flops
        )
    else:
        peak = _peak(system, work.dtype, work.cards)
        if not assumed or peak is None:
            return Estimate(work, None, None, "unknown", f"no record, and no assumed rate or "
                            f"peak for {system.device} {work.family} in {work.dtype}")  # fmt: skip
        fraction, exponent = float(assumed["fraction_of_peak"]), float(assumed["card_exponent"])
        rate = fraction * peak / work.cards * work.cards**exponent
        source, basis = "assumed", f"{fraction:.0%} of peak, cards^{exponent:g}: {assumed['why']}"
        startup, tail, warm = float(assumed["startup_s"]) + _loading(work, assumed), 0.0, None
    work_s = (work.timed_flops + work.warm_flops * (warm or 1.0)) / rate
    return Estimate(work, (startup or 0.0) + (tail or 0.0) + work_s, rate, source, basis)


def _loading(work: Work, assumed: Mapping[str, str]) -> float:
    return work.load_bytes / (float(assumed["load_gb_per_s"]) * 1e9)


@functools.cache
def figure_system(device: str) -> System | None:
    """The first system file (a base before its variants) whose accelerator is `device`."""
    return next((system for system in every_system() if system.accelerator == device), None)


def figure_seconds(told: Estimate, figure: Figure) -> float | None:
    """The forecast of what the figure timed: the whole job, or its work alone."""
    if told.seconds is None or told.rate is None:
        return None
    whole = figure.seen.startup_s is not None
    return told.seconds if whole else (figure.seen.work.timed_flops or 0.0) / told.rate


def judge_published() -> list[dict[str, Any]]:
    """Each published figure beside the forecast with every figure (what plan-time says), with
    it held out (predicted from the rest: its accelerator's other counts, else the assumed
    rate) and with the assumed rates alone: forecast / published."""
    figures, out = published_figures(), []
    for figure in figures:
        system, published_s = figure_system(figure.device), figure.seen.wall_s or math.nan
        row: dict[str, Any] = {"figure": figure.seen.work.output, "system": system and system.name}
        row["published_s"] = published_s
        rest = [f for f in figures if f is not figure]
        for name, given in (("forecast", figures), ("held_out", rest), ("assumed", [])):
            told = estimate(figure.seen.work, [], system, given) if system else None
            seconds = figure_seconds(told, figure) if told else None
            row[f"{name}_ratio"] = seconds / published_s if seconds else None
            row[f"{name}_source"] = told.source if told else "no system file"
        out.append(row)
    return out


# the study's plan ---------------------------------------------------------------------------
class StudyEstimates:
    """A study's jobs on a system with this system's records: what the rules and `plan` ask."""

    def __init__(self, config: Mapping[str, Any], system: System, seen: list | None = None) -> None:
        self.config, self.system = config, system
        self.layout = StudyLayout(config, system.name)
        self.seen = seen_in(record_files(Path(self.layout.measured))) if seen is None else seen
        self.capped: set[tuple[str, int]] = set()  # the jobs whose limit was capped, warned once

    @functools.cached_property
    def works(self) -> dict[str, Work]:
        """Every measuring job of the study (the layout's), by its output; a rule's runtime (at
        parse time) needs only its own."""
        jobs = [job for job in self.layout.jobs() if job.rule in FAMILY]
        return {j.path: work_of(j.rule, SimpleNamespace(**j.wildcards), j.path, self.config,
                                self.system) for j in jobs}  # fmt: skip

    def of(self, output: str) -> Estimate:
        return estimate(self.works[output], self.seen, self.system)

    def all(self) -> list[Estimate]:
        return [self.of(output) for output in self.works]

    def runtime(self, rule: str, wildcards: Any, attempt: int) -> int:
        """A Snakemake job's runtime in minutes: its forecast x MARGIN x attempt, bounded."""
        work = work_of(rule, wildcards, "", self.config, self.system)
        limit = (self.system.walltime or {}).get("max_minutes")
        told = estimate(work, self.seen, self.system)
        wanted = told.minutes(attempt, None)
        if limit and told.seconds and wanted > limit:  # capped: said once per job and attempt
            named = wildcards.items() if hasattr(wildcards, "items") else vars(wildcards).items()
            job = f"{rule} " + ",".join(f"{k}={v}" for k, v in named)
            if (job, attempt) not in self.capped:
                self.capped.add((job, attempt))
                print(f"accelstudy: {job} (attempt {attempt}) forecast {told.seconds / 60:.0f} min "
                      f"x {MARGIN} > {self.system.name}'s limit of {limit} min: capped at it",
                      file=sys.stderr)  # fmt: skip
        return told.minutes(attempt, limit)


def charge_of(system: System, work: Work, seconds: float) -> dict[str, Any]:
    """The site's charge for the job (accelstudy.cost), its node-hours and energy at full power."""
    nodes, whole_nodes = system.layout(work.cards)[0], work.cards >= system.per_node
    slurm, rule = system.slurm, system.charge or {}
    qos = slurm.get("qos") if whole_nodes else slurm.get("qos_under_node")
    whole = (rule.get("whole_node_partitions") or [None])[0] if whole_nodes else None
    used = Allocation(nodes=nodes, cards=work.cards, cores=work.cards, qos=qos, partition=whole)
    hours = seconds / 3600
    bill = charged(system.charge, used, hours, system.per_node)
    watts = (system.power or {}).get("watts_per_card")
    energy = watts * work.cards * seconds / 3.6e6 if watts else None
    return {"node_hours": nodes * hours, "charge": bill.get("units"), "unit": bill.get("unit"),
            "energy_kwh": energy}  # fmt: skip


def rows(forecasts: Iterable[Estimate], system: System) -> Iterator[dict[str, Any]]:
    limit = (system.walltime or {}).get("max_minutes")
    for f in forecasts:
        row = {"system": system.name, "rule": f.work.rule, "point": f.work.point, "jobs": 1}
        row["job"] = f.work.output
        row |= {"cards": f.work.cards, "hours": f.seconds and f.seconds / 3600}
        row |= charge_of(system, f.work, f.seconds) if f.seconds else {}
        over = bool(limit and f.seconds and f.seconds / 60 > limit)
        yield row | {"source": f.source, "over_walltime": over, "basis": f.basis}
