"""The forecast (accelstudy.forecast) as tables: `accelstudy plan --forecast` per point and per
site, against the partition's wall-time limit and an allocation; the report's forecast of each
job from the others' records beside what it measured (leave-one-out); and the assumed rates
judged against the published SR3 minutes (resources/diffusion_minutes.csv), never fitted to."""

import statistics
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import yaml

from accelstudy.config import validate_config
from accelstudy.finetune.planner import plan_sweep
from accelstudy.forecast import MARGIN, Seen, StudyForecast, forecast, rows, seen_in, work_of
from accelstudy.paths import PROJECT_ROOT, RESOURCES, SYSTEMS
from accelstudy.report.pages import NOTES, Section, write_csv
from accelstudy.systems import load_system

SUMMED = ["jobs", "hours", "node_hours", "charge", "energy_kwh"]


def by_point(jobs: pd.DataFrame) -> pd.DataFrame:
    """A row per point (its repeats summed; hours: one job's), the study's plan as a table."""
    keys = ["system", "rule", "point", "cards", "source", "unit", "over_walltime", "basis"]
    jobs = jobs.reindex(columns=[*keys, *SUMMED]).fillna({"unit": "-", "basis": "-"})
    points = jobs.groupby(keys, sort=False, dropna=False)[SUMMED].sum(min_count=1).reset_index()
    points["hours"] /= points["jobs"]
    return points.rename(columns={"hours": "hours_per_job"})


def sr3_judged() -> pd.DataFrame:
    """The paper's SR3 forecast with the assumed rates (no records) on each system whose card
    the paper timed, beside the published minutes: how far the stated assumptions are off."""
    config = validate_config(yaml.safe_load((PROJECT_ROOT / "config" / "paper.yaml").read_text()))
    published = pd.read_csv(RESOURCES / "diffusion_minutes.csv")
    out = []
    for path in sorted(SYSTEMS.glob("*.yaml"), key=lambda p: (len(p.stem), p.stem)):  # a base first
        system = load_system(path.stem)
        for _, row in published[published["device"] == system.accelerator].iterrows():
            cell = SimpleNamespace(devices=int(row["devices"]), repeat=0)
            work = work_of("diffusion", cell, "", config, system)
            told = forecast(work, [], system)
            minutes = told.seconds / 60 if told.seconds else None
            ratio = minutes / row["minutes"] if minutes else None
            out.append([system.name, row["device"], row["devices"], minutes, row["minutes"], ratio])
    columns = ["system", "device", "devices", "forecast_min", "published_min", "ratio"]
    return pd.DataFrame(out, columns=columns).drop_duplicates(["device", "devices"]).round(2)


def dry_run_outputs(configfile: Path, system: str) -> set[str]:
    """The record paths of the jobs Snakemake would run now (its dry run: only stale jobs)."""
    command = [sys.executable, "-m", "snakemake", "--configfile", str(configfile), "--config",
               f"system={system}", "--dry-run", "--cores", "1"]  # fmt: skip
    ran = subprocess.run(command, capture_output=True, text=True, cwd=Path.cwd(), check=False)
    if ran.returncode:
        raise SystemExit(f"snakemake --dry-run failed:\n{ran.stderr[-2000:]}")
    lines = [line.strip() for line in ran.stdout.splitlines()]
    return {part.strip() for line in lines if line.startswith("output:") for part in
            line.removeprefix("output:").split(",")}  # fmt: skip


def held_out(fits: Iterable[dict[str, Any]]) -> set[str]:
    """The points of the planner's rows (plan_sweep) held out for memory, as result paths end:
    their jobs only record the hole."""
    return {f"{r['model']}/{r['strategy']}/{r['attention']}/cards-{r['cards']}"
            for r in fits if r["held_out_for"]}  # fmt: skip


def plan_table(config: dict[str, Any], configfile: Path, name: str, dry_run: bool) -> tuple:
    """(a row per point, or per job of Snakemake's plan with `dry_run`; the held-out jobs)."""
    system, results = load_system(name), f"{config['results_dir']}/{config['study']}/"
    jobs = pd.DataFrame(rows(StudyForecast(config, system, results + name).all(), system))
    holes = held_out(plan_sweep(config, system)) if config["finetune"]["enabled"] else set()
    hole = jobs["point"].map(lambda point: any(point.endswith(h) for h in holes))
    jobs = jobs[~hole]
    if dry_run:
        jobs = jobs[jobs["job"].isin(dry_run_outputs(configfile, name))]
        jobs = jobs.assign(point=jobs["job"])
    jobs = jobs.assign(point=jobs["point"].str.removeprefix(results).str.removeprefix(f"{name}/"))
    return (by_point(jobs) if not jobs.empty else jobs), int(hole.sum())


def print_forecast(
    configfile: Path, systems: list[str], budget: float | None, dry_run: bool
) -> None:
    """`accelstudy plan --forecast`: per system, each point's time and charge, with the source of
    its rate; the totals; what exceeds the wall-time limit or the allocation (`budget`)."""
    config = validate_config(yaml.safe_load(Path(configfile).read_text()) or {})
    for name in systems or [config["system"]]:
        table, holes = plan_table(config, configfile, name, dry_run)
        shown = "per job of Snakemake's plan" if dry_run else "per point (repeats summed)"
        print(f"{name}: {shown}; {holes} jobs held out for memory (each records its hole)")
        if table.empty:
            print("  nothing to run")
            continue
        print(table.drop(columns=["system", "basis"]).to_string(index=False, float_format="%.3g"))
        unit, total = table["unit"].iloc[0], table[["node_hours", "charge", "energy_kwh"]].sum()
        energy = f", {total['energy_kwh']:.4g} kWh at full power" if total["energy_kwh"] else ""
        print(f"total: {total['node_hours']:.4g} node-hours, {total['charge']:.4g} {unit}{energy}")
        if table["over_walltime"].any():
            walltime = load_system(name).walltime or {}
            print(f"over the partition's {walltime['max_minutes']} minutes ({walltime['doc']}):")
            print(table[table["over_walltime"]][["rule", "point"]].to_string(index=False))
        if budget is not None:
            left = budget - total["charge"]
            verdict = "fits in it" if left >= 0 else f"exceeds it by {-left:.4g}"
            print(f"allocation {budget:g} {unit}: the study {verdict}; the costliest points:")
            costly = table.sort_values("charge", ascending=False).head(5)
            print(costly[["rule", "point", "charge"]].to_string(index=False))
        if (unknown := table[table["source"] == "unknown"]).shape[0]:
            print(f"no forecast for {int(unknown['jobs'].sum())} jobs (not in the totals): "
                  f"{unknown['basis'].iloc[0]}")  # fmt: skip
        for source, basis in table.groupby("source")["basis"].first().items():
            print(f"  {source}, e.g.: {basis}")
        print(f"  SLURM time limits: the forecast x {MARGIN} x the attempt, within the limit")
    print("The assumed rates judged against the published SR3 minutes (never fitted to them):")
    judged_sr3 = sr3_judged()
    told = judged_sr3.dropna(subset=["forecast_min"])
    print(told.to_string(index=False))
    if len(told) < len(judged_sr3):
        missing = sorted(set(judged_sr3["device"]) - set(told["device"]))
        print(f"  not forecast (no float32 peak in their system files): {', '.join(missing)}")


def judged(seen: list[Seen], system: Any) -> pd.DataFrame:
    """Every measured job beside what the others' records forecast for it (leave-one-out)."""
    out = []
    for one in seen:
        told = forecast(one.work, [s for s in seen if s is not one], system)
        error = told.seconds / one.wall_s - 1 if told.seconds and one.wall_s else None
        job = one.work.output.split(f"/{system.name}/", 1)[-1].removesuffix(".json")
        out.append([one.work.rule, job, one.wall_s, told.seconds, error, told.source, told.basis])
    columns = ["rule", "job", "measured_s", "forecast_s", "error", "source", "basis"]
    return pd.DataFrame(out, columns=columns)


def summary(table: pd.DataFrame) -> str:
    """Per rule: the median and the worst error of the forecasts."""
    said = []
    for rule, part in table.dropna(subset=["error"]).groupby("rule"):
        errors = part["error"].abs()
        worst = max(max(1 + e, 1 / (1 + e)) for e in part["error"])
        said.append(f"{rule}: median error {statistics.median(errors):.0%}, worst {worst:.2f}x "
                    f"over {len(part)} jobs")  # fmt: skip
    total = table.dropna(subset=["error"])[["forecast_s", "measured_s"]].sum()
    said.append(f"all: {total['forecast_s']:.0f} s forecast, {total['measured_s']:.0f} s ran")
    return "; ".join(said)


def sections(records: pd.DataFrame, results_dir: Path) -> list[Section]:
    """The forecast judged on this study's own jobs (tables/forecast_judged.csv)."""
    systems = list(records["system"].unique()) if "system" in records else []
    if len(systems) != 1 or records.empty:
        return []
    system = load_system(systems[0])
    table = judged(seen_in(records["record"]), system)
    if table.empty:
        return []
    write_csv(table, results_dir / "tables" / "forecast_judged.csv")
    note = f"{NOTES['forecast']} {summary(table)}."
    shown = table.assign(error=table["error"].map(lambda e: "-" if pd.isna(e) else f"{e:+.0%}"))
    return [Section("The forecast judged: each job beside what the others' records said", note,
                    shown.drop(columns="basis").round(1)),
            Section("The assumed rates judged: SR3 beside the published minutes",
                    NOTES["forecast_sr3"], sr3_judged())]  # fmt: skip


def point_forecasts(
    config: dict[str, Any], system: Any, records: Iterable[str | Path]
) -> pd.DataFrame:
    """`recommend`'s forecast: each fine-tuning point's hours and charge from `records`."""
    study = StudyForecast(config, system, "", seen=seen_in(records))
    jobs = pd.DataFrame(rows([f for f in study.all() if f.work.rule == "finetune"], system))
    return by_point(jobs) if not jobs.empty else jobs
