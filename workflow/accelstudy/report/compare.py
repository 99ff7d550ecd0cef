"""`accelstudy compare RUN... --out DIR`: runs of one study at several sites, side by side.

Records meet only where both measured the same work: every key but the systems' precision,
the repeat and run-derived values (see NOT_WORK), so stand-in data never meets real data.
Every record without a counterpart is listed with the keys that differ.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd

from accelstudy.records import SCHEMA_VERSION, validate_record
from accelstudy.report import diffusion, finetune, tables
from accelstudy.report.build import Section, write_csv, write_pages, write_records
from accelstudy.report.collect import flatten, load_published
from accelstudy.report.figures import _save

STAGES = ("baseline", "quantized", "finetune", "diffusion")
# what a system is compared on, the repeat, and what a run derives: not part of the work
NOT_WORK = ("repeat", "dtype", "settings.dtype", "data.file", "assignment", "data.normalisation")
# the coordinates of a point: a record whose work differs is matched to these to say why
POINT = ("stage", "model", "task", "protocol", "method", "recipe", "strategy", "attention",
         "cards", "devices")  # fmt: skip
# per stage, the numbers a ratio compares (the record's primary metric is added)
SPEEDS = {"baseline": ["tokens_per_s"], "quantized": ["tokens_per_s"],
          "finetune": ["tokens_per_s", "metric_samples_per_s"],
          "diffusion": ["metric_images_per_s", "metric_train_runtime_s"]}  # fmt: skip


class CompareError(ValueError):
    """Runs that cannot be compared as given, in one line naming the run and the fix."""


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {
            k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()
        }
    return {prefix[:-1]: json.dumps(value) if isinstance(value, list) else value}


def work(record: dict[str, Any]) -> dict[str, Any]:
    """What the record measured, as flat keys: everything but NOT_WORK."""
    top = {k: record.get(k) for k in ("stage", "model", "task", "protocol", "method",
                                      "data_source")}  # fmt: skip
    if record["stage"] == "baseline":
        del top["method"]  # a baseline's method is its precision: what systems differ in
    params = _flat(record["parameters"])
    kept = {k: v for k, v in params.items() if not any(k == n or k.startswith(n + ".")
                                                      for n in NOT_WORK)}  # fmt: skip
    return {**top, **kept}


def find_records(run: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(path, record) of every record of `results/<study>` (sensitivity chunks, bit
    assignments and data cards are JSON too, but not records)."""
    if not run.is_dir() or not any((run / stage).is_dir() for stage in (*STAGES, "ptq")):
        raise CompareError(
            f"'{run}' is not a results directory: pass results/<study> folders of finished "
            "runs (holding baseline/, ptq/, finetune/ or diffusion/)"
        )
    found = []
    for path in sorted(run.rglob("*.json")):
        if path.name.startswith(".") or "logs" in path.relative_to(run).parts:
            continue
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or "stage" not in record or "provenance" not in record:
            continue
        version = record.get("schema_version")
        if version != SCHEMA_VERSION:
            raise CompareError(
                f"{path}: record schema version {version or 'none'}, but this accelstudy "
                f"reads version {SCHEMA_VERSION}; re-run that study with this code"
            )
        try:
            validate_record(record)
        except jsonschema.ValidationError as exc:
            raise CompareError(f"{path}: not a valid record: {exc.message}") from None
        found.append((path, record))
    if not found:
        raise CompareError(f"'{run}' holds no result records; has its study run?")
    return found


def load(runs: Sequence[Path]) -> pd.DataFrame:
    """One row per record of every run: the report's columns, the work, provenance."""
    rows = []
    for run in runs:
        for path, record in find_records(Path(run)):
            measured = work(record)
            provenance = record["provenance"]
            rows.append({
                **flatten(record), "run": str(run), "record": str(path),
                "work": json.dumps(measured, sort_keys=True, default=str),
                "point": json.dumps({k: measured.get(k) for k in POINT}, default=str),
                "accelerator": (provenance.get("system") or {}).get("accelerator")
                or provenance["hardware"].get("device_name"),
                "memory_per_card_gb": (provenance.get("system") or {}).get("memory_per_card_gb"),
                "job": provenance.get("scheduler", {}).get("job_id", "local"),
                "versions": json.dumps(provenance["versions"], sort_keys=True),
            })  # fmt: skip
    records = pd.DataFrame(rows)
    check_systems(records)
    return records


def check_systems(records: pd.DataFrame) -> None:
    """Runs that call their system by one name must describe one machine."""
    for system, part in records.groupby("system"):
        machines = part.drop_duplicates(["accelerator", "memory_per_card_gb"])
        if len(machines) > 1:
            said = "; ".join(f"{r.run}: {r.accelerator}, {r.memory_per_card_gb} GB per card"
                             for r in machines.itertuples())  # fmt: skip
            raise CompareError(
                f"runs name the same system '{system}' but different machines ({said}); give "
                "each machine its own config/systems file and re-run one of them"
            )


def _differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    keys = sorted(set(mine) | set(theirs))
    return [f"{k}: {mine.get(k)} here, {theirs.get(k)} there" for k in keys
            if mine.get(k) != theirs.get(k)]  # fmt: skip


def split(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(matched, left out): records whose work another system also measured, and the rest
    with the keys that differ from the nearest record of the same point elsewhere."""
    systems = records.groupby("work")["system"].transform("nunique")
    matched, alone = records[systems > 1], records[systems == 1]
    reasons = []
    for row in alone.itertuples():
        others = records[(records["system"] != row.system) & (records["point"] == row.point)]
        if others.empty:
            reasons.append(f"no other system measured {row.stage} {row.point}")
            continue
        mine = json.loads(row.work)
        diffs = [_differences(mine, json.loads(w)) for w in others["work"].unique()]
        reasons.append("; ".join(min(diffs, key=len)))
    left = alone.assign(reason=reasons)[["system", "stage", "model", "task", "method", "run",
                                         "record", "reason"]]  # fmt: skip
    return matched, left.reset_index(drop=True)


def _quantities(records: pd.DataFrame) -> list[tuple[str, str, str | None]]:
    """(stage, column, metric) a ratio is taken of: each stage's speeds, and for baseline and
    quantized records the value of each metric apart (a perplexity is no accuracy)."""
    out: list[tuple[str, str, str | None]] = []
    for stage in STAGES:
        part = records[records["stage"] == stage]
        out += [(stage, column, None) for column in SPEEDS[stage] if not part.empty]
        if stage in STAGES[:2]:
            out += [(stage, "value", metric) for metric in part["metric"].dropna().unique()]
    return out


def ratios(matched: pd.DataFrame, reference: str) -> pd.DataFrame:
    """System / reference for the same work: the median over matched points (each point
    the median of its repeats), the points behind it and their spread (min-max)."""
    ok = matched[matched["status"].isin(["", "ok"])]
    rows = []
    for stage, column, metric in _quantities(ok):
        part = ok[(ok["stage"] == stage) & ((ok["metric"] == metric) if metric else True)]
        if column not in part or part[column].isna().all():
            continue
        per_point = part.groupby(["work", "system"])[column].agg(["median", "size"]).unstack()
        for other in sorted(set(part["system"]) - {reference}):
            if reference not in per_point["median"] or other not in per_point["median"]:
                continue
            both = per_point.dropna(subset=[("median", reference), ("median", other)])
            ratio = both[("median", other)] / both[("median", reference)]
            rows.append({
                "part": stage, "quantity": f"{metric} (metric)" if metric
                else column.removeprefix("metric_"), "system": other, "reference": reference,
                "ratio": ratio.median(), "points": len(ratio), "min": ratio.min(),
                "max": ratio.max(), "repeats": f"{both[('size', other)].median():g} / "
                                               f"{both[('size', reference)].median():g}",
            })  # fmt: skip
    return pd.DataFrame(rows).round(4)


def compare(runs: Iterable[str | Path], out: Path, reference: str | None = None) -> Path:
    """Read the runs, match their records, write the comparative report; return index.html."""
    runs = [Path(r) for r in runs]
    if len(runs) < 2:
        raise CompareError("compare needs at least two results directories")
    records = load(runs)
    systems = list(dict.fromkeys(records["system"]))
    reference = reference or systems[0]
    if reference not in systems:
        raise CompareError(f"--reference '{reference}' is none of the runs' systems {systems}")
    matched, left_out = split(records)
    index = write_comparison(records, matched, left_out, ratios(matched, reference), reference,
                             Path(out))  # fmt: skip
    print(index)
    return index


PROVENANCE = ["system", "stage", "model", "task", "method", "metric", "value", "tokens_per_s",
              "status", "run", "record", "git_commit", "job", "versions", "work"]  # fmt: skip
NOTE = (
    "Only work both systems measured is compared: same stage, model, task, protocol, data "
    "source, method and parameters (the systems' precision, the repeat and run-derived values "
    "aside). Ratios: system / reference for the same work, the median over matched points, "
    "each point the median of its repeats; min-max over the points. For runtimes below 1 is "
    "faster, for speeds above 1. Every number traces to `tables/matched.csv` (record file, "
    "run, git commit, versions, scheduler job)."
)


def _by_system(frame: pd.DataFrame, make, index: list[str]) -> pd.DataFrame:
    """`make(records of one system)` side by side, columns prefixed with the system."""
    made = {system: make(part) for system, part in frame.groupby("system", sort=False)}
    parts = [t.set_index(index).add_prefix(f"{s}: ") for s, t in made.items() if not t.empty]
    return pd.concat(parts, axis=1).reset_index() if parts else pd.DataFrame()


def _tradeoff(points: pd.DataFrame, out: Path) -> None:
    """Quality against compression, a panel per task: hue the system, marker the bit list."""
    import seaborn as sns

    grid = sns.relplot(data=points, x="compression", y="value", hue="system", style="bit list",
                       col="task", kind="scatter", s=90, facet_kws={"sharey": False})  # fmt: skip
    for ax, (_, part) in zip(grid.axes.flat, points.groupby("task", sort=False), strict=False):
        ax.set(xlabel="compression ratio (FP32 = 1)", ylabel=part["metric"].iloc[0])
    _save(grid.figure, out)


def _ptq(matched: pd.DataFrame, folder: Path) -> list:

    quantized = matched[matched["stage"] == "quantized"]
    if quantized.empty:
        return []
    published = load_published()
    table1 = _by_system(matched, tables.table1, ["model", "data", "task", "metric"])
    points = pd.concat([tables.tradeoff_points(part, published).assign(system=system)
                        for system, part in matched.groupby("system", sort=False)])  # fmt: skip
    _tradeoff(points[points["panel"].str.startswith("ours")], folder / "tradeoff.png")
    speed = matched[matched["stage"].isin(["baseline", "quantized"])].pivot_table(
        index=["stage", "model", "task", "method"], columns="system", values="tokens_per_s",
        aggfunc="median").round(1).reset_index()  # fmt: skip
    return [
        Section("Table 1 by system: mixed-precision PTQ", "", table1),
        Section("Table 1, published (Gaudi2 / A100)", "", tables.published_table1(published)),
        Section("Quality against compression, by system", "", figure="tradeoff.png"),
        Section("Evaluation tokens/s by system and recipe", "", speed),
    ]


def _finetune(matched: pd.DataFrame, folder: Path) -> list:

    runs = finetune.finetune_runs(matched)
    if runs.empty:
        return []
    finetune.write_figures(runs, finetune.finetune_points(runs), folder)
    holes = runs.pivot_table(index="status", columns="system", values="record",
                             aggfunc="size", fill_value=0).reset_index()  # fmt: skip
    return [
        Section("Fig. 2 across systems: fine-tuning against cards", figure=finetune.FIGURES[0]),
        Section("DDP vs ZeRO-3 vs FSDP across systems", figure=finetune.FIGURES[1]),
        Section("Fine-tuning points by status and system (does-not-fit: the holes)", "", holes),
    ]


def _diffusion(matched: pd.DataFrame, folder: Path) -> list:

    runs = diffusion.diffusion_runs(matched)
    if runs.empty:
        return []
    diffusion.write_figures(runs, folder)
    return [
        Section("Fig. 3 across systems, with the published curves", diffusion.note(runs),
                figure=diffusion.FIGURES[0]),
        Section("SR3 scaling efficiency by system", diffusion.TABLE_NOTE,
                diffusion.diffusion_table(runs)),
    ]  # fmt: skip


def write_comparison(records: pd.DataFrame, matched: pd.DataFrame, left_out: pd.DataFrame,
                     ratio: pd.DataFrame, reference: str, out: Path) -> Path:  # fmt: skip
    """The comparative report: tables under out/tables, figures under out/figures."""

    tables, folder = out / "tables", out / "figures"
    write_records(records, tables)
    write_csv(matched[PROVENANCE], tables / "matched.csv")
    write_csv(left_out, tables / "left_out.csv")
    write_csv(ratio, tables / "ratios.csv")
    runs = records.groupby(["run", "system", "accelerator"], sort=False).agg(
        records=("record", "size"), commits=("git_commit", lambda c: ", ".join(c.unique()))
    ).reset_index()  # fmt: skip
    sections = [
        Section("Runs", "", runs),
        Section(f"Ratios against {reference}", NOTE, ratio),
        *_ptq(matched, folder),
        *_finetune(matched, folder),
        *_diffusion(matched, folder),
        Section("Left out: records without a counterpart, and the keys that differ", "",
                left_out.drop(columns=["run"])),
    ]  # fmt: skip
    intro = (f"{len(records)} records from {len(runs)} runs; {len(matched)} matched, "
             f"{len(left_out)} left out.")  # fmt: skip
    return write_pages("accelstudy comparison across systems", intro, sections, out)
