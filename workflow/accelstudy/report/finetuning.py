"""Part 2 of the report: Fig. 2 (holes shown), the points table, the paper's findings and ours."""

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from accelstudy.report.agreement import flagged_records
from accelstudy.report.collect import joined
from accelstudy.report.figures import draw
from accelstudy.report.outputs import figure, output
from accelstudy.report.pages import NOTES, Section, our_numbers, write_csv
from accelstudy.strategies import labels
from accelstudy.uncertainty import SPREAD, repeats_interval

ATTENTIONS = ["fused", "eager"]
HOLES = {  # why a point has no speed
    "does-not-fit": "does not fit",
    "predicted-does-not-fit": "predicted not to fit",
    "ok-resumed": "resumed from a checkpoint: not timed",
    "trains-differently": "flagged: its losses left DDP's (not timed)",
}
KEYS = ["system", "model", "strategy", "attention", "cards"]
# metric columns the tables read; absent from the collected records where no point ran
PREDICTED = ["predicted_total", "predicted_model_states", "predicted_parameters"]
METRICS = ["samples_per_s", "final_loss", "peak_memory_bytes", *PREDICTED]
WORK = 1000  # samples: the fixed amount of work whose time Fig. 2a shows
FIG2A_AXES = {"tokens_per_s": "tokens / s", "seconds": f"seconds per {WORK:,} samples"}
FIGURES = (figure("fig2a"), figure("fig2b"))
# the table's columns, in groups: the point, its speed, what training gave, peak, model states
POINT = {k: k for k in [*KEYS, "status", "repeats"]}
SPEED = {"tps": "tokens/s", "spread": "tokens/s interval", "sps": "samples/s", "mfu": "MFU"}
# energy and charge for the same work, each with its repeats' interval
SPENT = {"j": "J/token", "j_spread": "J/token interval"}
SPENT |= {"cost": "charge per 1M tokens", "cost_spread": "charge interval"}
RESULT = {"speedup": "speed-up", "efficiency": "scaling efficiency", "loss": "final loss"}
PEAK = {"peak": "peak GiB (max rank)", "predicted": "predicted GiB", "ratio": "peak / predicted"}
STATES = {"planned": "model states MiB (planner)", "states": "model states MiB (rank 0)"}
# a point's medians over its ok repeats (record column: table key), and its repeats' intervals
MEDIANS = {
    "tokens_per_s": "tps", "metric_samples_per_s": "sps", "metric_final_loss": "loss",
    "model_states_rank0": "states", "mfu": "mfu", "j_per_token": "j", "cost_per_mtok": "cost",
}  # fmt: skip
SPREADS = {"tokens_per_s": "spread", "j_per_token": "j_spread", "cost_per_mtok": "cost_spread"}
RATIO = {"states_ratio": "rank 0 / planner"}
COLUMNS = {**POINT, **SPEED, **SPENT, **RESULT, **PEAK, **STATES, **RATIO}


def _rank(column: pd.Series) -> pd.Series:
    """Sort key: strategies and attention settings in the paper's order, others after."""
    named = column.name in ("strategy", "attention")
    order = [*labels().values(), *ATTENTIONS]
    return column.map(lambda v: order.index(v) if v in order else len(order)) if named else column


def finetune_runs(records: pd.DataFrame) -> pd.DataFrame:
    """A row per fine-tuning record, strategies by the paper's names, seconds for WORK; one
    whose losses left its reference's (report.agreement) has status `trains-differently`."""
    runs = records[records["stage"] == "finetune"]
    if "record" in runs:  # a strategy that trains something else is a hole, not a speed
        flagged = runs["record"].isin(flagged_records(records))
        runs = runs.assign(status=runs["status"].mask(flagged, "trains-differently"))
    runs = runs.assign(**{f"metric_{m}": runs.get(f"metric_{m}", float("nan")) for m in METRICS})
    runs = runs.astype({"cards": int}).assign(strategy=runs["strategy"].replace(labels()))
    runs = runs.assign(seconds=WORK / runs["metric_samples_per_s"])
    return runs.sort_values(KEYS, key=_rank, kind="stable").reset_index(drop=True)


def finetune_points(runs: pd.DataFrame) -> pd.DataFrame:
    """A row per point: medians of the ok repeats, speed-up, planned vs measured memory."""
    ok = runs[runs["status"] == "ok"].groupby(KEYS)
    medians = ok[list(MEDIANS)].median().rename(columns=MEDIANS)
    spreads = ok[list(SPREADS)].agg(repeats_interval).rename(columns=SPREADS)
    peak = ok["metric_peak_memory_bytes"].max().rename("peak")
    points = runs.groupby(KEYS, sort=False).agg(
        status=("status", joined),
        repeats=("status", "size"),
        predicted=("metric_predicted_total", "first"),
        planned=("metric_predicted_model_states", "first"),
    )
    points = points.join([medians, spreads, peak]).reset_index()
    base = points.dropna(subset=["tps"]).groupby(KEYS[:4], sort=False)[["cards", "tps"]].first()
    points = points.join(base.add_suffix("_base"), on=KEYS[:4])
    points[["peak", "predicted"]] /= 2**30  # GiB and MiB: powers of two, so the ratios stay exact
    points[["planned", "states"]] /= 2**20
    points[list(SPREADS.values())] = points[list(SPREADS.values())].astype(object).fillna("-")
    points["speedup"] = points["tps"] / points["tps_base"]
    points["efficiency"] = points["speedup"] / (points["cards"] / points["cards_base"])
    points["ratio"] = points["peak"] / points["predicted"]
    points["states_ratio"] = points["states"] / points["planned"]
    return points


def finetune_table(points: pd.DataFrame) -> pd.DataFrame:
    """The points as the report and tables/finetune.csv show them (empty: no fine-tuning)."""
    return points[list(COLUMNS)].rename(columns=COLUMNS).round(3)


def _say(finding: str, rows: pd.DataFrame) -> str:
    return "; ".join(NOTES["our_findings"][finding].format_map(r) for _, r in rows.iterrows())


def findings(points: pd.DataFrame) -> pd.DataFrame:
    """The paper's findings, each beside ours from the points (empty: no fine-tuning)."""
    if points.empty:
        return pd.DataFrame()
    n = points["cards"].map(lambda n: f"{n:.0f} card{'s' if n != 1 else ''}")
    points = points.assign(n=n, why=points["status"].replace(HOLES))
    ran = points.dropna(subset=["tps"])
    ddp = ran[(ran["strategy"] == "DDP") & (ran["cards"] > ran["cards_base"])]
    ddp = ddp[ddp["cards"] == ddp.groupby(KEYS[:4])["cards"].transform("max")]
    pairs = ran.pivot_table("tps", [*KEYS[:3], "cards"], "attention").reindex(columns=ATTENTIONS)
    gain = (pairs["fused"] / pairs["eager"] - 1).dropna()
    spread = f"median of {len(gain)} points, {gain.min():+.0%} to {gain.max():+.0%}"
    attention = f"fused {gain.median():+.0%} against eager ({spread})"
    best = ran.loc[ran.groupby(["system", "model", "cards"])["tps"].idxmax()]
    wide = ran.pivot_table("tps", KEYS[1:], "system")
    first = wide.columns[0] if len(wide.columns) else "-"
    ratios = {s: (wide[s] / wide[first]).median() for s in wide.columns[1:]}
    systems = [f"{s}: {r:.2f}x {first} (median over points both ran)" for s, r in ratios.items()]
    our_findings = [
        _say("scaling", ddp) or "no DDP point to set against a smaller card count",
        attention if len(gain) else "not both measured",
        _say("fastest", best) or "no point ran",
        _say("hole", points[points["tps"].isna()]) or "every point ran",
        "; ".join(systems) or f"one system in this study ({joined(points['system'])})",
    ]
    paper = list(NOTES["paper_findings"].items())
    return pd.DataFrame(paper, columns=["finding", "paper (Gaudi)"]).assign(ours=our_findings)


def _palette(runs: pd.DataFrame) -> dict[str, tuple]:
    """One colour per strategy in every panel (the paper's order)."""
    return dict(zip(dict.fromkeys(runs["strategy"]), sns.color_palette("tab10"), strict=False))


def mark_holes(ax: plt.Axes, holes: pd.DataFrame, palette: dict, vertical: bool = False) -> None:
    """An x at the bottom (at column x) per point that did not run, labelled why (upright: bars)."""
    bottom, (left, right) = ax.get_xaxis_transform(), ax.get_xlim()
    at_bottom: dict[str, Any] = {"transform": bottom, "clip_on": False, "zorder": 5}
    label: dict[str, Any] = dict(
        xycoords=bottom, textcoords="offset points", fontsize=7, rotation=90 * vertical
    )
    for k, (at, (_, r)) in enumerate(zip(holes["x"], holes.iterrows(), strict=True)):
        colour = palette[r["strategy"]]
        ax.scatter([at], [0.02], marker="x", s=60, color=colour, **at_bottom)
        side = -1 if (at - left) / (right - left) > 0.6 else 1
        ha = "center" if vertical else "left" if side > 0 else "right"
        offset = (0, 8) if vertical else (5 * side, 4 + 10 * k)
        text = f"{r['strategy']} {r['attention']}: {HOLES.get(r['status'], r['status'])}"
        ax.annotate(text, (at, 0.02), xytext=offset, color=colour, ha=ha, **label)


def _one_legend(fig: plt.Figure, beside: plt.Axes) -> None:
    """One legend for all panels, right of the top-right one, so none hides a point."""
    legends = {ax: legend for ax in fig.axes if (legend := ax.get_legend())}
    if legends:
        first = next(iter(legends))
        title = legends[first].get_title().get_text()
        for legend in legends.values():
            legend.remove()
        entries = first.get_legend_handles_labels()
        beside.legend(*entries, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, title=title)


def _panel(frame: pd.DataFrame, system: str, model: str) -> pd.DataFrame:
    return frame[(frame["system"] == system) & (frame["model"] == model)]


def fig2a(runs: pd.DataFrame, points: pd.DataFrame) -> plt.Figure:
    """Tokens/s and seconds per WORK samples against cards, a column per (system, model)."""
    panels = list(dict.fromkeys(zip(runs["system"], runs["model"], strict=True)))
    palette = _palette(runs)
    lines = {"hue": "strategy", "style": "attention", "markers": True, "err_style": "bars"}
    fig, axes = plt.subplots(2, len(panels), squeeze=False, figsize=(5.5 * len(panels), 8))
    for column, (system, model) in zip(axes.T, panels, strict=True):
        part, holes = _panel(runs, system, model), _panel(points, system, model)
        ok, holes = part[part["status"] == "ok"], holes[holes["tps"].isna()]
        cards = sorted(part["cards"].unique())
        pad = max(0.5, 0.06 * (cards[-1] - cards[0]))
        for ax, (y, label) in zip(column, FIG2A_AXES.items(), strict=True):
            if not ok.empty:
                sns.lineplot(ok, x="cards", y=y, palette=palette, ax=ax, **lines, **SPREAD)
                _ideal(ax, ok, y, cards)
            ax.set(xlabel="cards", ylabel=label, title=f"{model} on {system}", xticks=cards)
            ax.set(xlim=(cards[0] - pad, cards[-1] + pad), ylim=(0, None))
            mark_holes(ax, holes.assign(x=holes["cards"]), palette)
    _one_legend(fig, axes[0, -1])
    return fig


def _ideal(ax: plt.Axes, ok: pd.DataFrame, y: str, cards: list) -> None:
    """Ideal scaling from the first strategy's median at the fewest cards: tokens/s times the
    card ratio, seconds over it."""
    first = ok[ok["strategy"] == ok["strategy"].iloc[0]]
    base = first[first["cards"] == first["cards"].min()]
    if len(cards) < 2 or base.empty:
        return
    start, scale = base[y].median(), [c / base["cards"].iloc[0] for c in cards]
    ideal = [start * r if y == "tokens_per_s" else start / r for r in scale]
    ax.plot(cards, ideal, ls="--", color="grey", lw=1, label=f"ideal ({base['strategy'].iloc[0]})")


def largest_model(runs: pd.DataFrame) -> str:
    """The model with the most planned parameter bytes (sharded: times the cards)."""
    whole = runs["metric_predicted_parameters"] * runs["cards"].where(runs["strategy"] != "DDP", 1)
    return runs["model"].iloc[whole.fillna(0).argmax()]


def fig2b(runs: pd.DataFrame, points: pd.DataFrame) -> plt.Figure:
    """DDP vs ZeRO-3 vs FSDP for the largest model: grouped bars of tokens/s per system."""
    model = largest_model(runs)
    part = runs[runs["model"] == model]
    attention = "fused" if part["attention"].eq("fused").any() else part["attention"].iloc[0]
    part = part[part["attention"] == attention]
    palette, systems = _palette(runs), list(dict.fromkeys(part["system"]))
    fig, axes = plt.subplots(1, len(systems), squeeze=False, figsize=(6.5 * len(systems), 4.5))
    for ax, system in zip(axes[0], systems, strict=True):
        ran = part[part["system"] == system]
        cards, strategies = sorted(ran["cards"].unique()), list(dict.fromkeys(ran["strategy"]))
        ok, holes = ran[ran["status"] == "ok"], _panel(points, system, model)
        if not ok.empty:
            bars = {"hue": "strategy", "order": cards, "hue_order": strategies, "palette": palette}
            sns.barplot(ok, x="cards", y="tokens_per_s", ax=ax, **bars, **SPREAD)
        ax.set_xticks(range(len(cards)), cards)
        ax.set(xlim=(-0.5, len(cards) - 0.5), xlabel="cards", ylabel="tokens / s")
        ax.set_title(f"{model} on {system}, {attention} attention")
        width = 0.8 / len(strategies)  # seaborn's dodge: the bars share 0.8 of a slot
        holes = holes[(holes["attention"] == attention) & holes["tps"].isna()]
        slots = zip(holes["cards"], holes["strategy"], strict=True)
        xs = [cards.index(c) - 0.4 + width * (strategies.index(s) + 0.5) for c, s in slots]
        mark_holes(ax, holes.assign(x=xs), palette, vertical=True)
    _one_legend(fig, axes[0, -1])
    return fig


def write_figures(runs: pd.DataFrame, points: pd.DataFrame, folder: Path) -> None:
    """Fig. 2a and 2b, or placeholders saying why (the rule declares them in every study)."""
    for name, make in zip(FIGURES, (fig2a, fig2b), strict=True):
        draw(folder / name, "no fine-tuning records in this study", make, runs, points)


def sections(records: pd.DataFrame, folder: Path) -> list[Section]:
    """Fig. 2, the points and the findings; the table and figures are written in every study."""
    runs = finetune_runs(records)
    points = finetune_points(runs)
    table = finetune_table(points)
    write_csv(table, output(folder, "finetune_table"))
    write_figures(runs, points, output(folder, "fig2a").parent)
    if runs.empty:
        return []
    methods = "; ".join(m for m in runs["peak_memory_method"].dropna().unique() if m)
    title = "Fine-tuning points: speed-up, scaling efficiency, planned and measured memory"
    models, systems = joined(runs["model"]), joined(runs["system"])
    ours = our_numbers(runs, "finetune", models=models, systems=systems)
    said = findings(points)
    ours_by = dict(zip(said["finding"], said["ours"], strict=True))
    return [
        Section("Fig. 2a: fine-tuning throughput and time for fixed work against cards",
                NOTES["finetune_figure"], figure=FIGURES[0]),
        Section("Fig. 2b: DDP vs ZeRO-3 vs FSDP for one model", figure=FIGURES[1]),
        Section(title, f"{NOTES['finetune_table']} Peak measured as: {methods or '-'}.", table),
        Section("Fine-tuning findings: the paper's beside ours", ours, said,
                finding=f"Fine-tuning: {ours_by['scaling (DDP)']}; fastest: "
                        f"{ours_by['fastest strategy']}."),
    ]  # fmt: skip
