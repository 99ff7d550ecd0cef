"""What to run where: per (model, system) the fit map over strategy x cards (card and host
memory) and, from the measurements, the fastest, the cheapest and the least-energy point that
fits; planner-only where nothing was measured, labelled predicted. And the paper's rule,
"shard only when the model does not fit", checked against the measurements."""

from pathlib import Path

import pandas as pd

from accelstudy.config import read_config
from accelstudy.errors import require
from accelstudy.finetune.planner import plan_sweep
from accelstudy.layout import StudyLayout, record_files, system_folders
from accelstudy.report.agreement import AGREEMENT_COLUMNS, agreement, flagged_records
from accelstudy.report.collect import collect_records
from accelstudy.report.estimates import held_out, point_estimates
from accelstudy.report.pages import NOTES, Section
from accelstudy.strategies import REPLICATED
from accelstudy.systems import load_system
from accelstudy.uncertainty import ONE_REPEAT, within_each_other

CHOICES = {  # the choice, the column it minimises (negated: maximises), and its unit
    "fastest": ("tokens_per_s", -1, "tokens/s"),
    "cheapest": ("cost_per_mtok", 1, "charged units per 1M tokens"),
    "least energy": ("j_per_token", 1, "J/token"),
}
KEY = ["model", "system", "strategy", "cards"]


def measured_points(records: pd.DataFrame) -> pd.DataFrame:
    """Fine-tuning points that ran and train what their reference trains (report.agreement):
    medians over repeats of tokens/s (and its range), the charge per 1M tokens
    (collect.energy_and_cost) and joules per token."""
    columns = [c for c, _, _ in CHOICES.values()]
    bounds = [f"{c}_{end}" for c in columns for end in ("low", "high")]
    if records.empty or "stage" not in records:
        return pd.DataFrame(columns=[*KEY, "attention", *columns, "cost_unit", *bounds])
    runs = records[(records["stage"] == "finetune") & (records["status"] == "ok")]
    if "record" in runs:
        runs = runs[~runs["record"].isin(flagged_records(records))]
    group = runs.groupby([*KEY, "attention"])
    spread = group[columns].agg(["min", "max"]).set_axis(bounds, axis=1)
    return group[columns].median().join([group["cost_unit"].first(), spread]).reset_index()


def _repeats(point: pd.Series, column: str) -> tuple[float, float, float]:
    return point[column], point[f"{column}_low"], point[f"{column}_high"]


def choices(points: pd.DataFrame) -> pd.DataFrame:
    """Per (model, system) and choice, the point and the number behind it (blank: not measured)."""
    rows = []
    for (model, system), part in points.groupby(["model", "system"]):
        for choice, (column, sign, unit) in CHOICES.items():
            known = part.dropna(subset=[column])
            row = {"model": model, "system": system, "choice": choice, "basis": "measured"}
            if known.empty:
                rows.append(row | {"point": "-", "value": None, "unit": f"{unit}: not measured"})
                continue
            best = known.iloc[(known[column] * sign).argmin()]
            row |= {"point": _label(best), "value": round(float(best[column]), 6)}
            unit = f"{best['cost_unit']} per 1M tokens" if column == "cost_per_mtok" else unit
            alike = [_label(o) for _, o in known.drop(index=best.name).iterrows()
                     if within_each_other(_repeats(best, column), _repeats(o, column))]  # fmt: skip
            repeats = "; ".join(alike) or "every other point told apart"
            if best[f"{column}_low"] == best[f"{column}_high"]:
                repeats = f"{ONE_REPEAT}; {repeats}"
            rows.append(row | {"unit": unit, "within": repeats})
    return pd.DataFrame(rows)


def _label(point: pd.Series) -> str:
    cards = f"{point['cards']:.0f} card{'s' if point['cards'] != 1 else ''}"
    return f"{point['strategy']} on {cards}, {point['attention']}"


def sharding_rule(fits: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Per (model, system, cards): does DDP fit (planner), which strategy was fastest there, and
    whether "shard only when the model does not fit" holds (DDP fastest where it fits)."""
    rows = []
    for (model, system, cards), part in fits.groupby(["model", "system", "cards"]):
        ddp_fits = bool((part[part["strategy"] == REPLICATED]["held_out_for"] == "").any())
        ran = points[(points["model"] == model) & (points["system"] == system)]
        ran = ran[ran["cards"] == cards].dropna(subset=["tokens_per_s"])
        row = {"model": model, "system": system, "cards": cards, "ddp_fits": ddp_fits}
        if ran.empty:
            expected = REPLICATED if ddp_fits else "a sharded strategy"
            rows.append(row | {"fastest": "-", "rule": f"not measured (predicted: {expected})"})
            continue
        best = ran.iloc[ran["tokens_per_s"].argmax()]
        measured = zip(ran["strategy"], ran["attention"], ran["tokens_per_s"], strict=True)
        speeds = "; ".join(f"{s}/{a} {t:.1f}" for s, a, t in measured)
        verdict = _verdict(ran, best, ddp_fits)
        rows.append(row | {"fastest": best["strategy"], "rule": f"{verdict} (tokens/s: {speeds})"})
    return pd.DataFrame(rows)


def _verdict(ran: pd.DataFrame, best: pd.Series, ddp_fits: bool) -> str:
    """DDP fastest where it fits, else a sharded strategy; a sharded one ahead of a fitting DDP
    that the repeats cannot tell from it (uncertainty.within_each_other) is noise, not a breach."""
    if (best["strategy"] == REPLICATED) == ddp_fits:
        return "holds"
    ddp = ran[ran["strategy"] == REPLICATED]
    if ddp.empty:
        return "does not hold"
    fastest_ddp = ddp.iloc[ddp["tokens_per_s"].argmax()]
    ahead = best["tokens_per_s"] / fastest_ddp["tokens_per_s"] - 1
    if within_each_other(_repeats(best, "tokens_per_s"), _repeats(fastest_ddp, "tokens_per_s")):
        return f"holds: within each other's repeats' interval ({best['strategy']} {ahead:+.1%})"
    single = f", {ONE_REPEAT}" if best["tokens_per_s_low"] == best["tokens_per_s_high"] else ""
    return f"does not hold ({best['strategy']} {ahead:+.1%}{single})"


def measured_fits(records: pd.DataFrame) -> pd.DataFrame:
    """The study's own fit map: a point fits unless its record says it did not (held out by
    the planner, or out of memory when it ran)."""
    runs = records[records["stage"] == "finetune"]
    why = runs["held_out_for"].where(runs["status"] != "does-not-fit", "card (ran out)")
    return runs.assign(held_out_for=why.fillna(""))[[*KEY, "attention", "held_out_for"]]


def sections(records: pd.DataFrame) -> list[Section]:
    """The report's "what to run where", from the study's fine-tuning measurements: the
    strategies' agreement, the choices, then the sharding rule (none: no points)."""
    points = measured_points(records)
    if points.empty:
        return []
    checked = agreement(records).filter(AGREEMENT_COLUMNS)
    agree = "Strategies train the same model: each one's losses beside DDP's"
    return [
        *([Section(agree, NOTES["same_model"], checked)] if not checked.empty else []),
        Section("What to run where: the fastest, cheapest and least-energy point",
                NOTES["where"], choices(points)),
        Section("Shard only when the model does not fit: the paper's rule, checked",
                NOTES["rule"], sharding_rule(measured_fits(records), points)),
    ]  # fmt: skip


def recommendation(
    model: str, system: str, configfile: Path, results: list[Path]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """`accelstudy recommend`'s answer for one model on one system: the planner's fit map over
    strategy x cards, the measured points (from `results`) and the fitting points' forecasts."""
    config = read_config(configfile)
    fine_tuned = config["finetune"]["models"]
    problem = f"'{model}' is not fine-tuned by {configfile}; name one of {fine_tuned}"
    require(model in fine_tuned, "model", problem)
    config["finetune"]["models"] = [model]
    machine = load_system(system)
    planned = plan_sweep(config, machine)
    roots = [root for run in map(Path, results) for root in [run, *system_folders(run)]]
    paths = [p for root in roots for p in record_files(root, ("finetune",))]
    points = measured_points(collect_records(paths) if paths else pd.DataFrame())
    points = points[(points["model"] == model) & (points["system"] == system)]
    holes = held_out(planned, StudyLayout(config, system))
    own = [p for p in paths if system in p.parts]
    return pd.DataFrame(planned), points, point_estimates(config, machine, own, holes)
