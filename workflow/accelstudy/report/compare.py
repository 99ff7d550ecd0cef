"""`accelstudy compare RUN... --out DIR`: runs of one study at several sites, side by side. Records
meet only where both measured the same work (all keys but NOT_WORK); the others say what differs."""

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import jsonschema
import numpy as np
import pandas as pd

from accelstudy.errors import StudyError
from accelstudy.files import read_json
from accelstudy.layout import MEASURED_STAGES, MEASURING_FOLDERS, misplaced, system_folders
from accelstudy.records import SCHEMA_VERSION, validate_record
from accelstudy.report import finetuning, quantization, superresolution
from accelstudy.report.collect import flatten, items_of, joined, unusable
from accelstudy.report.pages import (
    NOTES,
    Section,
    not_shown,
    relative_records,
    write_csv,
    write_pages,
    write_records,
)
from accelstudy.tasks import TASKS
from accelstudy.uncertainty import REPEATS_RULE, holm, paired_difference

STAGES = MEASURED_STAGES
# what a system is compared on, the repeat, and what a run derives: not part of the work
NOT_WORK: tuple[str, ...] = ("repeat", "dtype", "settings.dtype", "compute_dtype", "data.file")
NOT_WORK += ("assignment", "data.normalisation")
# a point's coordinates (evaluation, then fine-tuning/SR3): unmatched work is told against these
EVALUATION = ["stage", "model", "task", "protocol", "method", "recipe"]
POINT = [*EVALUATION, "strategy", "attention", "cards", "devices"]
# per stage, the numbers a ratio compares (the record's primary metric is added)
PER_TOKEN = ["j_per_token", "cost_per_mtok"]  # energy and charge for the same work
PER_IMAGE = ["j_per_image", "cost_per_kimage"]
SPEEDS = {stage: ["tokens_per_s", "mfu", *PER_TOKEN] for stage in STAGES[:2]}
SPEEDS["finetune"] = ["tokens_per_s", "metric_samples_per_s", "mfu", *PER_TOKEN]
SPEEDS["diffusion"] = ["metric_images_per_s", "metric_train_runtime_s", "mfu", *PER_IMAGE]
RATIOS = ["part", "quantity", "system", "reference", "ratio", "verdict", "interval_low"]
RATIOS += ["interval_high", "points", "min", "max", "repeats"]
LOWER_IS_BETTER = {f"{t.metric.name} (metric)" for t in TASKS.values() if t.metric.lower_is_better}
LOWER_IS_BETTER |= {"train_runtime_s", *PER_TOKEN, *PER_IMAGE}
# a record's table columns: what it is, and where it comes from
MATCH_KEYS = ["system", "stage", "model", "task", "method"]
TRACE_KEYS = ["run", "record", "git_commit"]
PROVENANCE = [*MATCH_KEYS, "metric", "value", "tokens_per_s", "status", *TRACE_KEYS, "job"]
PROVENANCE += ["versions", "work"]
MACHINE = "{run}: {accelerator}, {memory_per_card_gb} GB per card"  # a system's, as a run says
LEFT_OUT = "Left out: records without a counterpart, and the keys that differ"


class CompareError(StudyError, ValueError):
    """Runs that cannot be compared as given, in one line naming the run and the fix."""


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix[:-1]: json.dumps(value) if isinstance(value, list) else value}
    return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}


def work(record: dict[str, Any]) -> dict[str, Any]:
    """What the record measured, as flat keys: everything but NOT_WORK (and their sub-keys)."""
    top = {k: record.get(k) for k in (*EVALUATION[:5], "data_source")}
    if record["stage"] == "baseline":
        del top["method"]  # a baseline's method is its precision: what systems differ in
    skip = tuple(f"{name}." for name in NOT_WORK)
    kept = {k: v for k, v in _flat(record["parameters"]).items() if not f"{k}.".startswith(skip)}
    inputs = _flat(record["inputs"], "inputs.")  # the revisions and digests, not the rows' digest
    named = {k: v for k, v in inputs.items() if not k.endswith((".prepared", ".file"))}  # digests
    return {**top, **kept, **named}


def holds_results(folder: Path) -> bool:
    """A results/<study> folder: its stages' folders, per system (or at its top, as before)."""
    roots = [folder, *system_folders(folder)]
    return any((root / stage).is_dir() for root in roots for stage in MEASURING_FOLDERS)


def find_records(run: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(path, record) per record of `results/<study>` (other JSON files are skipped)."""
    if not run.is_dir() or not holds_results(run):
        raise CompareError(
            f"'{run}' is not a results directory: pass results/<study> folders of finished "
            "runs (holding baseline/, ptq/, finetune/ or diffusion/)"
        )
    found = []
    for path in sorted(run.rglob("*.json")):
        if path.name.startswith(".") or "logs" in path.relative_to(run).parts:
            continue
        record = read_json(path)
        if not isinstance(record, dict) or "stage" not in record or "provenance" not in record:
            continue
        if (version := record.get("schema_version")) not in (SCHEMA_VERSION - 1, SCHEMA_VERSION):
            raise CompareError(
                f"{path}: record schema version {version or 'none'}, but this accelstudy "
                f"reads version {SCHEMA_VERSION}; re-run that study with this code"
            )
        try:
            if version == SCHEMA_VERSION:  # the previous version is shown, never matched
                validate_record(record, [key for _, key in unusable(record)])
        except jsonschema.ValidationError as exc:
            raise CompareError(f"{path}: not a valid record: {exc.message}") from None
        if why := misplaced(path, record):
            raise CompareError(f"{why}: delete it (its job runs again) or move it back")
        found.append((path, record))
    if not found:
        raise CompareError(f"'{run}' holds no result records; has its study run?")
    return found


def load(runs: Iterable[Path]) -> pd.DataFrame:
    """One row per record of every run: the report's columns, the work, provenance."""
    rows = []
    for run in runs:
        for path, record in find_records(Path(run)):
            version, provenance = record["schema_version"], record["provenance"]
            measured = work(record) if version == SCHEMA_VERSION else {"unknown": str(path)}
            system = provenance.get("system") or {}
            accelerator = system.get("accelerator") or provenance["hardware"].get("device_name")
            row = {
                **flatten(record),
                "run": str(run),
                "record": str(path),
                "work": json.dumps(measured, sort_keys=True, default=str),
                "point": json.dumps({k: measured.get(k) for k in POINT}, default=str),
                "accelerator": accelerator,
                "memory_per_card_gb": system.get("memory_per_card_gb"),
                "job": provenance.get("scheduler", {}).get("job_id", "local"),
                "versions": json.dumps(provenance["versions"], sort_keys=True),
            }
            rows.append(row)
    records = pd.DataFrame(rows)
    # runs that call their system by one name must describe one machine
    for system, part in records.groupby("system"):
        machines = part.drop_duplicates(["accelerator", "memory_per_card_gb"])
        if len(machines) > 1:
            said = "; ".join(MACHINE.format_map(r) for _, r in machines.iterrows())
            raise CompareError(
                f"runs name the same system '{system!s}' but different machines ({said}); give "
                "each machine its own config/systems file and re-run one of them"
            )
    return records


def split(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(matched, left out): the left out with the keys that differ from the nearest match."""
    systems = records.groupby("work")["system"].transform("nunique")
    matched, alone = records[systems > 1], records[systems == 1]
    reasons = []
    for row in alone.to_dict("records"):
        here = json.loads(row["work"])
        if "unknown" in here:
            reasons.append(NOTES["unknown"].format(version=SCHEMA_VERSION - 1))
            continue
        same_point = (records["system"] != row["system"]) & (records["point"] == row["point"])
        if not same_point.any():
            reasons.append(f"no other system measured {row['stage']} {row['point']}")
            continue
        differences = []
        for there in map(json.loads, records.loc[same_point, "work"].unique()):
            keys = sorted(k for k in set(here) | set(there) if here.get(k) != there.get(k))
            differences.append([f"{k}: {here.get(k)} here, {there.get(k)} there" for k in keys])
        nearest = min(differences, key=len)
        reasons.append("; ".join(nearest))
    left = alone.assign(reason=reasons)[[*MATCH_KEYS, *TRACE_KEYS[:2], "reason"]]
    return matched, left.reset_index(drop=True)


def _quantities(records: pd.DataFrame) -> Iterator[tuple[str, str, str | None]]:
    """(stage, column, metric) per ratio: each stage's speeds, each metric's values apart."""
    for stage in STAGES:
        yield from ((stage, column, None) for column in SPEEDS[stage])
        metrics = records[records["stage"] == stage]["metric"].dropna().unique()
        yield from ((stage, "value", m) for m in metrics if stage in STAGES[:2])


def verdict(quantity: str, ratio: float) -> str:
    """'better' or 'worse' (or 'same') for the system, by the quantity's direction."""
    if ratio == 1 or np.isnan(ratio):
        return "same" if ratio == 1 else ""
    return "better" if (ratio > 1) != (quantity in LOWER_IS_BETTER) else "worse"


def repeats_bounds(values: dict[str, list[np.ndarray]], other: str, reference: str) -> list:
    """The ratio's interval by the repeats rule (uncertainty.REPEATS_RULE): per point, the
    lowest over the highest repeat and the highest over the lowest; over points, the median of
    those bounds; none where a side has one repeat (its spread unknown)."""
    if min((len(v) for side in (other, reference) for v in values[side]), default=0) < 2:
        return [None, None]
    pairs = list(zip(values[other], values[reference], strict=True))
    lows = [np.nanmin(o) / np.nanmax(r) for o, r in pairs]
    highs = [np.nanmax(o) / np.nanmin(r) for o, r in pairs]
    return [round(float(np.median(bounds)), 4) for bounds in (lows, highs)]


def ratios(matched: pd.DataFrame, reference: str) -> pd.DataFrame:
    """System / reference per quantity: the median over points, each the median of its repeats."""
    ok = matched[matched["status"].isin(["", "ok"])]
    rows = []
    for stage, column, metric in _quantities(ok):
        part = ok[(ok["stage"] == stage) & ((ok["metric"] == metric) if metric else True)]
        systems = set(part["system"])
        if column not in part or part[column].isna().all() or reference not in systems:
            continue
        # unstacking a frame's MultiIndex gives a frame (the stubs say: or a Series)
        by_point = part.groupby(["work", "system"])[column]
        per_point = cast(pd.DataFrame, by_point.agg(["median", "size"]).unstack())
        values = by_point.apply(lambda v: v.to_numpy())
        quantity = f"{metric} (metric)" if metric else column.removeprefix("metric_")
        units = part.groupby("system")["cost_unit"].first()
        for other in sorted(systems - {reference}):
            if column.startswith("cost_per") and units[other] != units[reference]:
                apart = f"not comparable: {units[other]} against {units[reference]}"
                rows.append({"part": stage, "quantity": quantity, "system": other} | {
                    "reference": reference, "verdict": apart})  # fmt: skip
                continue
            both = per_point.dropna(subset=[("median", reference), ("median", other)])
            ratio = both[("median", other)] / both[("median", reference)]
            repeats = f"{both[('size', other)].median():g} / {both[('size', reference)].median():g}"
            sides = {s: [values[(w, s)] for w in both.index] for s in (other, reference)}
            middle = ratio.median()
            low, high = repeats_bounds(sides, other, reference)
            told = verdict(quantity, middle)
            if low is not None and low <= 1 <= high:
                told = f"{told}, within the repeats' interval" if told != "same" else told
            row = [stage, quantity, other, reference, middle, told, low, high, len(ratio)]
            rows.append(dict(zip(RATIOS, [*row, ratio.min(), ratio.max(), repeats], strict=True)))
    return pd.DataFrame(rows).round(4)


def paired_items(matched: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per evaluation both systems ran (the same work, hence the same items) and its primary
    metric: the system minus the reference, item by item, with its 95% interval and Holm's p."""
    ok = matched[matched["stage"].isin(STAGES[:2]) & matched["status"].isin(["", "ok"])]
    rows = []
    for _, part in ok.groupby("work", sort=False):
        first = part.drop_duplicates("system").set_index("system")  # each system's first repeat
        theirs = items_of(str(first.at[reference, "record"])) if reference in first.index else None
        if theirs is None:
            continue
        for system, ran in first.drop(index=reference).iterrows():
            if (ours := items_of(ran["record"])) is not None:
                point = {k: ran[k] for k in ("stage", "model", "task", "method")}
                quantity = {"quantity": f"{ran['metric']} (metric)", "system": system}
                rows.append(point | quantity | paired_difference(ran["metric"], ours, theirs))
    table = pd.DataFrame(rows)
    if len(table):
        table["p (Holm)"] = holm(table["p"].to_numpy()).round(4)
    return table.round(6)


def compare(runs: Iterable[str | Path], out: Path, reference: str | None = None) -> Path:
    """Match the runs' records and write the comparative report under out; return index.html."""
    run_dirs = [Path(r) for r in runs]
    out = Path(out)
    for folder in [out, *out.parents]:  # the comparison's tables must not replace a run's
        if holds_results(folder) or folder.resolve() in [r.resolve() for r in run_dirs]:
            raise CompareError(
                f"--out '{out}' is inside the results of a study ('{folder}'), whose tables it "
                "would overwrite; give a folder outside every results/<study>"
            )
    records = load(run_dirs)
    systems = list(dict.fromkeys(records["system"]))
    if len(systems) < 2:
        raise CompareError(
            f"the runs hold records of one system ({systems[0]}); compare needs two or more: "
            "results/<study> folders of other sites, or a study run on another system too"
        )
    reference = reference or systems[0]
    if reference not in systems:
        raise CompareError(f"--reference '{reference}' is none of the runs' systems {systems}")
    matched, left_out = split(records)
    ratio, paired = ratios(matched, reference), paired_items(matched, reference)
    if len(paired):  # each metric's item-level difference beside its ratio (one point: its own)
        summary = paired.groupby(["stage", "quantity", "system"]).agg(
            paired_difference=("difference", "median"), paired_points=("items", "size"),
            paired_ci95_low=("ci95_low", "min"), paired_ci95_high=("ci95_high", "max"),
        )  # fmt: skip
        ratio = ratio.join(summary, on=["part", "quantity", "system"])
    write_records(records, out)
    tables = dict(matched=matched[PROVENANCE], left_out=left_out, ratios=ratio, paired=paired)
    for name, table in tables.items():
        write_csv(table, out / "tables" / f"{name}.csv")
    by_site = records.groupby(["run", "system", "accelerator"], sort=False, as_index=False)
    sites = by_site.agg(records=("record", "size"), commits=("git_commit", joined))
    sections = [
        Section("Runs", "", sites),
        Section(f"Ratios against {reference}", NOTES["ratios"].format(rule=REPEATS_RULE), ratio),
        Section("Metrics item by item, against the reference", NOTES["paired"], paired),
        # each part's, as in a study's report, its systems apart
        *quantization.sections(matched, out),
        *finetuning.sections(matched, out),
        *superresolution.sections(matched, out),
        Section(LEFT_OUT, "", relative_records(left_out)),
        *not_shown(records),
    ]
    counts = f"{len(matched)} matched, {len(left_out)} left out"
    intro = f"{len(records)} records from {len(sites)} runs; {counts}."
    return write_pages("accelstudy comparison across systems", intro, sections, out)
