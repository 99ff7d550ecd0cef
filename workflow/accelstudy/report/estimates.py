"""The forecast (accelstudy.forecast) as tables: `accelstudy plan-time`'s per point and per
site, against the partition's wall-time limit and an allocation; the report's forecast of each
job from the others' records beside what it measured (leave-one-out); and the assumed rates
judged against the published SR3 minutes (resources/diffusion_minutes.csv), never fitted to."""

import statistics
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from accelstudy.config import read_config
from accelstudy.finetune.planner import plan_sweep
from accelstudy.forecast import Seen, StudyEstimates, estimate, rows, seen_in, work_of
from accelstudy.layout import StudyLayout, job_name
from accelstudy.paths import PROJECT_ROOT, RESOURCES
from accelstudy.report.figures import draw, plain_numbers
from accelstudy.report.outputs import figure, output
from accelstudy.report.pages import NOTES, Section, write_csv
from accelstudy.systems import every_system, load_system

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
    config = read_config(PROJECT_ROOT / "config" / "paper.yaml")
    published, out = pd.read_csv(RESOURCES / "diffusion_minutes.csv"), []
    for system in every_system():  # a base before its variants
        for _, row in published[published["device"] == system.accelerator].iterrows():
            cell = SimpleNamespace(devices=int(row["devices"]), repeat=0)
            told = estimate(work_of("diffusion", cell, "", config, system), [], system, [])
            minutes = told.seconds / 60 if told.seconds else None
            ratio = minutes / row["minutes"] if minutes else None
            out.append([system.name, row["device"], row["devices"], minutes, row["minutes"], ratio])
    columns = ["system", "device", "devices", "forecast_min", "published_min", "ratio"]
    return pd.DataFrame(out, columns=columns).drop_duplicates(["device", "devices"]).round(2)


def held_out(fits: Iterable[dict[str, Any]], layout: StudyLayout) -> set[str]:
    """The fine-tuning jobs of the planner's rows (plan_sweep) held out for memory: they only
    record the hole."""
    cell = ("model", "strategy", "attention", "cards")
    repeats = range(layout.config["finetune"]["repeats"])
    return {layout.path("finetune", **{k: r[k] for k in cell}, repeat=n)
            for r in fits if r["held_out_for"] for n in repeats}  # fmt: skip


def time_table(config: dict[str, Any], name: str, only: set[str] | None = None) -> tuple:
    """(a row per point, or per job of `only` (Snakemake's dry run); the held-out jobs)."""
    system = load_system(name)
    estimates = StudyEstimates(config, system)
    jobs = pd.DataFrame(rows(estimates.all(), system))
    fits = plan_sweep(config, system) if config["finetune"]["enabled"] else []
    hole = jobs["job"].isin(held_out(fits, estimates.layout))
    jobs = jobs[~hole]
    if only is not None:
        jobs = jobs[jobs["job"].isin(only)].assign(point=lambda frame: frame["job"])
    results = f"{estimates.layout.results}/"
    jobs = jobs.assign(point=jobs["point"].str.removeprefix(results).str.removeprefix(f"{name}/"))
    return (by_point(jobs) if not jobs.empty else jobs), int(hole.sum())


def judged(seen: list[Seen], system: Any) -> pd.DataFrame:
    """Every measured job beside what the others' records forecast for it (leave-one-out)."""
    out = []
    for one in seen:
        told = estimate(one.work, [s for s in seen if s is not one], system)
        error = told.seconds / one.wall_s - 1 if told.seconds and one.wall_s else None
        job = one.work.output.split(f"/{system.name}/", 1)[-1].removesuffix(".json")
        out.append([one.work.rule, job, one.wall_s, told.seconds, error, told.source, told.basis])
    columns = ["rule", "job", "measured_s", "forecast_s", "error", "source", "basis"]
    return pd.DataFrame(out, columns=columns)


def summary(table: pd.DataFrame) -> str:
    """Per rule: the median and the worst error of the forecasts."""
    said = []
    for rule, part in table.dropna(subset=["error"]).groupby("rule"):
        worst = max(max(1 + e, 1 / (1 + e)) for e in part["error"])
        said.append(f"{rule}: median error {statistics.median(part['error'].abs()):.0%}, "
                    f"worst {worst:.2f}x over {len(part)} jobs")  # fmt: skip
    total = table.dropna(subset=["error"])[["forecast_s", "measured_s"]].sum()
    said.append(f"all: {total['forecast_s']:.0f} s forecast, {total['measured_s']:.0f} s ran")
    return "; ".join(said)


def judged_figure(table: pd.DataFrame) -> plt.Figure:
    """Each job's forecast against what it measured, a colour per rule, log axes, y = x and
    the +-25% band around it: a point above the line was forecast slower than it ran."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for rule, part in table.dropna(subset=["forecast_s"]).groupby("rule", sort=False):
        ax.scatter(part["measured_s"], part["forecast_s"], label=str(rule), s=30, zorder=3)
    ends = [table[["measured_s", "forecast_s"]].min().min() / 1.5]
    ends.append(table[["measured_s", "forecast_s"]].max().max() * 1.5)
    ax.plot(ends, ends, c="black", lw=0.8, label="forecast = measured")
    ax.fill_between(ends, [e * 0.75 for e in ends], [e * 1.25 for e in ends], color="0.9", zorder=0)
    ax.set(xscale="log", yscale="log", xlabel="measured, s", ylabel="forecast, s")
    plain_numbers(ax)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def sections(records: pd.DataFrame, results_dir: Path) -> list[Section]:
    """The forecast judged on this study's own jobs (the `forecast_judged` table, empty where
    there is no one system's records to judge)."""
    systems = list(records["system"].unique()) if "system" in records else []
    one = len(systems) == 1 and not records.empty
    table = judged(seen_in(records["record"]), load_system(systems[0])) if one else judged([], None)
    write_csv(table, output(results_dir, "forecast_judged"))
    draw(output(results_dir, "forecast_figure"), "no records to judge", judged_figure, table)
    if table.empty:
        return []
    shown = table.assign(error=table["error"].map(lambda e: "-" if pd.isna(e) else f"{e:+.0%}"))
    return [Section("The forecast judged: each job beside what the others' records said",
                    f"{NOTES['forecast']} {summary(table)}.", shown.drop(columns="basis").round(1),
                    figure("forecast_figure")),
            Section("The assumed rates judged: SR3 beside the published minutes",
                    NOTES["forecast_sr3"], sr3_judged())]  # fmt: skip


def point_estimates(
    config: dict[str, Any], system: Any, records: Iterable[str | Path], holes: set[str]
) -> pd.DataFrame:
    """`recommend`'s forecast: each fine-tuning point's hours and charge from `records`, but the
    jobs held out (`holes`)."""
    study = StudyEstimates(config, system, seen=seen_in(records))
    jobs = pd.DataFrame(rows([f for f in study.all() if f.work.rule == "finetune"], system))
    if jobs.empty:
        return jobs
    point = jobs["point"].map(lambda p: job_name(Path(p).relative_to(study.layout.measured)))
    return by_point(jobs.assign(point=point)[~jobs["job"].isin(holes)])
