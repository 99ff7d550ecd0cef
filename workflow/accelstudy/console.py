"""What the planning commands print (`plan-memory`, `plan-fit`, `plan-time`, `recommend`, from
the tables the report and the planner compute), and the dry run `plan-time -n` asks of Snakemake."""

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accelstudy.config import read_config
from accelstudy.errors import StudyError
from accelstudy.forecast import MARGIN
from accelstudy.paths import SYSTEMS
from accelstudy.strategies import REPLICATED, labels
from accelstudy.systems import every_system, load_system


def print_memory(
    model: str, device_kind: str, memory_per_card_gb: float | None, **workload: Any
) -> None:
    """`accelstudy plan-memory`: one point's per-card bytes by kind, and whether it fits."""
    from accelstudy.finetune.planner import plan_point

    plan = plan_point(model, device=device_kind, **workload)
    for key, value in plan.as_dict().items():
        print(f"{key:>13s} {value / 2**30:9.2f} GiB")
    if memory_per_card_gb:
        verdict = "fits" if plan.fits(memory_per_card_gb) else "does not fit"
        print(f"{verdict} a {memory_per_card_gb:g} GB card")


def print_fit(
    configfile: Path, system: list[str], every_point: bool, format: str = "table"
) -> None:
    """`accelstudy plan-fit`: per system (default: all), how many points fit, then the points
    held out for memory (`every_point`: all); csv or json: every point of every system as data."""
    import pandas as pd

    from accelstudy.finetune.planner import memory_per_card, plan_sweep
    from accelstudy.peak import peak

    config, point = read_config(configfile), ["model", "strategy", "attention", "cards"]
    systems, fit_on = every_system(), {}  # a variant's fitting points, planned once

    def fitting(machine: Any) -> set[tuple]:
        if machine.name not in fit_on:
            rows = pd.DataFrame(plan_sweep(config, machine))
            fits = rows.loc[rows["held_out_for"] == "", point]
            fit_on[machine.name] = set(fits.itertuples(index=False, name=None))
        return fit_on[machine.name]

    table, every = format == "table", []
    for name in system or sorted(p.stem for p in SYSTEMS.glob("*.yaml")):
        machine = load_system(name)
        if memory_per_card(machine, 1) is None:  # a card's, never host RAM
            print(f"{name}: card memory unknown: state memory_per_card_gb in its system file",
                  file=sys.stdout if table else sys.stderr)  # fmt: skip
            continue
        rows = pd.DataFrame(plan_sweep(config, machine))
        rows["card_margin_gb"] = rows["card_offer_gb"] - rows["card_gb"]  # below 0: short by
        held = rows[rows["held_out_for"] != ""]
        if table:
            print(f"{name}: {len(rows) - len(held)} of {len(rows)} points fit")
        # the shipped variants of this system (perlmutter-80gb of perlmutter): where they fit
        shipped = [v for v in systems if v.name.startswith(f"{name}-")] if len(held) else []
        variants = {v.name: fitting(v) for v in shipped}
        keys = list(held[point].itertuples(index=False, name=None))
        where = [", ".join(v for v, fit in variants.items() if key in fit) or "-" for key in keys]
        rows.loc[held.index, "fits_on"] = where
        if not table:
            every.append(rows)
            continue
        for variant, fit in variants.items():
            fit_there = sum(key in fit for key in keys)
            print(f"  held out here, fit on {variant}: {fit_there} of {len(keys)}")
        shown = rows if every_point else rows.loc[held.index]
        if not shown.empty:
            print(shown.drop(columns="system").to_string(index=False, float_format="%.1f"))
        for dtype in rows["dtype"].dropna().unique():
            limit = peak(machine, machine.device, dtype, 1, 1)
            rate = f"{limit['flops_per_s'] / 1e12:g} TFLOP/s, " if "flops_per_s" in limit else ""
            print(f"  peak per card in {dtype}: {rate}{limit['source']}")
        if "host_offer_gb" in rows and rows["host_offer_gb"].isna().all():
            print(f"  host RAM unplanned: config/systems/{name}.yaml states no host_memory_gb")
    if every:
        found = pd.concat(every, ignore_index=True)
        as_json = format == "json"
        text = found.to_json(orient="records", indent=1) if as_json else found.to_csv(index=False)
        print(str(text).rstrip("\n"))


def warn_host_overflow(config: Mapping[str, Any]) -> None:
    """check-config with skip_predicted_oom false: the points whose host plan exceeds the
    node's RAM run anyway (warned), past HOST_REFUSED_PAST times it are held out at the job."""
    from accelstudy.finetune.planner import HOST_REFUSED_PAST, plan_sweep

    try:
        rows = plan_sweep(config, load_system(config["system"]))
    except (OSError, StudyError) as error:  # a model to prepare first (a GGUF's)
        print(f"host RAM not planned ({error}): run plan-fit once the models are prepared")
        return
    for row in (r for r in rows if "host" in r["held_out_for"]):
        planned, offered = row["host_gb"], row["host_offer_gb"]
        what = f"{row['model']} {row['strategy']} {row['attention']} on {row['cards']} cards"
        verdict = "it runs (skip_predicted_oom: false) and may be killed"
        if planned > HOST_REFUSED_PAST * offered:
            verdict = f"past {HOST_REFUSED_PAST}x the node's, its job holds it out all the same"
        print(f"warning: {what} plans {planned:.1f} GB of host RAM against {offered:.1f} GB: "
              f"{verdict}")  # fmt: skip


def dry_run_outputs(configfile: Path, system: str) -> set[str]:
    """The record paths of the jobs Snakemake would run now (its dry run: only stale jobs)."""
    command = [sys.executable, "-m", "snakemake", "--configfile", str(configfile), "--config",
               f"system={system}", "--dry-run", "--cores", "1"]  # fmt: skip
    ran = subprocess.run(command, capture_output=True, text=True, cwd=Path.cwd(), check=False)
    if ran.returncode:
        raise SystemExit(f"snakemake --dry-run failed:\n{ran.stderr[-2000:]}")
    lines = [line.strip() for line in ran.stdout.splitlines()]
    parts = [part for line in lines if line.startswith("output:")
             for part in line.removeprefix("output:").split(",")]  # fmt: skip
    return {part.strip().removesuffix(" (update)") for part in parts}  # a flag, said after it


def charge_words(name: str, unit: str) -> str:
    """What the two totals count, in words: nodes held, and the site's charge by its rule."""
    rule = load_system(name).charge or {}
    said = "node-hours: the whole nodes the jobs hold x their hours; "
    if not rule:
        return said + f"no charge: config/systems/{name}.yaml states no charge rule"
    said += f"{unit}: what the site charges"
    if fractional := rule.get("fractional_qos"):
        said += f" (a job under a node in QOS {', '.join(fractional)}: its share of the node)"
    elif rule.get("per") == "core":
        said += " (the cores a job holds)"
    return said + (f", {rule['doc']}" if rule.get("doc") else "")


def time_summary(name: str, table: Any, holes: int, budget: float | None) -> dict[str, Any]:
    """A system's forecast in a few numbers: the totals, what each counts, what stands out."""
    unit = next((u for u in table["unit"] if u != "-"), "-")  # an unknown row's is "-"
    total = table[["node_hours", "charge", "energy_kwh"]].sum()
    unknown = int(table.loc[table["source"] == "unknown", "jobs"].sum())
    summary = {"system": name, "jobs": int(table["jobs"].sum()), "held_out_for_memory": holes,
               "node_hours": float(total["node_hours"]), "charge": float(total["charge"]),
               "unit": unit, "energy_kwh": float(total["energy_kwh"]),
               "counts": charge_words(name, unit), "jobs_without_forecast": unknown,
               "over_walltime": table.loc[table["over_walltime"], "point"].tolist(),
               "walltime": load_system(name).walltime or {}}  # fmt: skip
    if budget is not None:
        summary |= {"budget": budget, "budget_left": budget - summary["charge"]}
    return summary


def summary_lines(told: dict[str, Any]) -> list[str]:
    energy = f", {told['energy_kwh']:.4g} kWh at full power" if told["energy_kwh"] else ""
    charge = f"{told['charge']:.4g} {told['unit']}" if told["unit"] != "-" else "charge unknown"
    lines = [f"{told['system']}: {told['node_hours']:.4g} node-hours, {charge}"
             f"{energy} over {told['jobs']} jobs; "
             f"{told['held_out_for_memory']} held out for memory (each records its hole)",
             f"  {told['counts']}"]  # fmt: skip
    if told["jobs_without_forecast"]:
        lines.append(f"  no forecast for {told['jobs_without_forecast']} jobs (not in the totals)")
    if told["over_walltime"]:
        limit = told["walltime"]
        lines.append(f"  over the partition's {limit.get('max_minutes')} minutes "
                     f"({limit.get('doc')}): {', '.join(told['over_walltime'])}")  # fmt: skip
    if "budget" in told:
        left = told["budget_left"]
        verdict = "fits in it" if left >= 0 else f"exceeds it by {-left:.4g}"
        lines.append(f"  allocation {told['budget']:g} {told['unit']}: the study {verdict}")
    return lines


def print_time(
    configfile: Path,
    system: list[str],
    budget: float | None,
    dry_run: bool,
    format: str = "table",
    by: str = "point",
) -> None:
    """`accelstudy plan-time`: per system, the totals first (and what each counts), then each
    point's (or rule's) time and charge with the source of its rate; `format` csv or json: the
    same as data (csv: the rows; json: summaries, rows and the published SR3 check)."""
    import pandas as pd

    from accelstudy.report.estimates import sr3_judged, time_table

    config, summaries, tables = read_config(configfile), [], []
    for name in system or [config["system"]]:
        only = dry_run_outputs(configfile, name) if dry_run else None
        table, holes = time_table(config, name, only)
        if table.empty:
            summaries.append({"system": name, "jobs": 0, "held_out_for_memory": holes})
            continue
        if by == "rule":
            keys = ["system", "rule", "source", "unit"]
            summed = ["jobs", "node_hours", "charge", "energy_kwh"]
            grouped = table.groupby(keys, sort=False)
            table = grouped[summed].sum().join(grouped["over_walltime"].any()).reset_index()
            table = table.assign(point=table["rule"], basis=grouped["basis"].first().values)
        summaries.append(time_summary(name, table, holes, budget))
        tables.append(table)
    rows = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    judged_sr3 = sr3_judged()
    if format == "json":
        out = {"summaries": summaries, "rows": rows.to_dict(orient="records")}
        print(json.dumps(out | {"sr3_judged": judged_sr3.to_dict(orient="records")}, indent=1))
        return
    if format == "csv":
        print(rows.drop(columns=["basis"], errors="ignore").to_csv(index=False), end="")
        return
    for summary in summaries:
        print("\n".join(summary_lines(summary)) if summary["jobs"] else f"{summary['system']}: "
              f"nothing to run; {summary['held_out_for_memory']} held out for memory")  # fmt: skip
    for table in tables:
        shown = "per rule" if by == "rule" else (
            "per job of Snakemake's plan" if dry_run else "per point (repeats summed)")  # fmt: skip
        print(f"\n{table['system'].iloc[0]}, {shown}:")
        dropped = ["system", "basis", *(["point", "cards"] if by == "rule" else [])]
        shown_rows = table.drop(columns=dropped, errors="ignore")
        print(shown_rows.to_string(index=False, float_format="%.3g"))
        if budget is not None:
            print("the costliest:")
            costly = table.sort_values("charge", ascending=False).head(5)
            print(costly[["rule", "point", "charge"]].to_string(index=False))
        for source, basis in table.groupby("source")["basis"].first().items():
            print(f"  {source}, e.g.: {basis}")
        print(f"  SLURM time limits: the forecast x {MARGIN} x the attempt, within the limit")
    print("\nThe assumed rates judged against the published SR3 minutes (never fitted to them):")
    told = judged_sr3.dropna(subset=["forecast_min"])
    print(told.to_string(index=False))
    if len(told) < len(judged_sr3):
        missing = sorted(set(judged_sr3["device"]) - set(told["device"]))
        print(f"  not forecast (no float32 peak in their system files): {', '.join(missing)}")


def print_recommendation(
    model: str | None, system: str, configfile: Path, results: list[Path], format: str = "table"
) -> None:
    """`accelstudy recommend`: per model (default: each the study fine-tunes), the fit map, the
    choices (measured, else predicted), the rule, each fitting point's forecast; csv: every
    point's fit map row; json: each model's parts as records."""
    import pandas as pd

    from accelstudy.report.recommend import choices, recommendation, sharding_rule

    models = [model] if model else read_config(configfile)["finetune"]["models"]
    found = {name: recommendation(name, system, configfile, results) for name in models}
    if format != "table":
        parts: dict[str, dict[str, Any]] = {}
        for name, (fits, points, told) in found.items():
            shown = {"fits": fits, "rule": sharding_rule(fits, points), "forecast": told}
            shown["choices"] = choices(points) if not points.empty else pd.DataFrame()
            parts[name] = {key: frame.to_dict(orient="records") for key, frame in shown.items()}
        if format == "json":
            print(json.dumps({"system": system, "models": parts}, indent=1, default=str))
            return
        rows = [row | {"model": name} for name, part in parts.items() for row in part["fits"]]
        print(pd.DataFrame(rows).to_csv(index=False), end="")
        return
    for number, (name, parts_of_one) in enumerate(found.items()):
        print("" if number == 0 else "\n", end="")
        recommend_one(name, system, *parts_of_one)


def recommend_one(model: str, system: str, fits: Any, points: Any, told: Any) -> None:
    from accelstudy.report.recommend import choices, sharding_rule

    fit_map = fits[["strategy", "attention", "cards", "card_gb", "host_gb", "held_out_for"]]
    print(f"{model} on {system}: {(fits['held_out_for'] == '').sum()} of {len(fits)} points fit")
    print(fit_map.to_string(index=False, float_format="%.1f"))
    if fits["host_offer_gb"].isna().all():
        print(f"host RAM unplanned: config/systems/{system}.yaml states no host_memory_gb")
    if not points.empty:
        print(choices(points).to_string(index=False))
    elif (fitting := fits[fits["held_out_for"] == ""]).empty:
        print("predicted (planner only): no point of the sweep fits this system")
    else:
        replicated = fitting[fitting["strategy"] == REPLICATED]
        pick = (fitting if replicated.empty else replicated).sort_values("cards").iloc[0]
        why = "does not fit at any card count" if replicated.empty else "fits: the paper's rule"
        print(
            f"predicted (planner only, nothing measured on {system}): {pick['strategy']} on "
            f"{pick['cards']} cards, the fewest that fit ({labels()[REPLICATED]} {why})"
        )
    print(sharding_rule(fits, points).to_string(index=False))
    if told.empty:
        print(f"forecast: no point of the sweep fits {system}")
        return
    print(f"forecast per point on {system} (rates: {', '.join(told['source'].unique())}):")
    print(told[["point", "hours_per_job", "charge", "unit", "source"]].to_string(index=False))
