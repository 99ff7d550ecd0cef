"""Seaborn figures for the report, written as PNG, and the helpers every part's figures share."""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from accelstudy.report.tables import BASELINE_LABELS, bit_order
from accelstudy.tasks import TASK_NAMES, TASKS

BASELINES = list(BASELINE_LABELS.values())
SPREAD = {"estimator": "median", "errorbar": ("pi", 100)}  # median of the repeats, bars min-max


def save(fig: plt.Figure, out: Path) -> None:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def draw(out: Path, why_empty: str, make: Callable[..., plt.Figure], data: Any, *args: Any) -> None:
    """make(data, *args), or (the rule declares it regardless) a figure saying why data is empty."""
    if not data.empty:
        return save(make(data, *args), out)
    fig, ax = plt.subplots(figsize=(6, 1))
    ax.set_axis_off()
    ax.text(0.5, 0.5, why_empty, ha="center", va="center")
    return save(fig, out)


def baseline_figure(records: pd.DataFrame) -> plt.Figure:
    """Left: the primary metric per task and protocol; right: evaluation throughput."""
    data = records[records["stage"] == "baseline"].copy()
    data["label"] = data["task"] + "\n(" + data["protocol"] + ", " + data["data"] + ")"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    accuracy = data[data["metric"] == "accuracy"]
    if not accuracy.empty:
        sns.barplot(data=accuracy, x="label", y="value", hue="model", ax=axes[0])
        dtypes = ", ".join(accuracy["method"].map(lambda m: BASELINE_LABELS.get(m, m)).unique())
        axes[0].set(ylabel="accuracy", ylim=(0, 1), title=f"Multiple-choice accuracy ({dtypes})")
        axes[0].axhline(0.25, ls=":", c="grey")
    sns.barplot(data=data, x="label", y="tokens_per_s", hue="model", ax=axes[1])
    axes[1].set(ylabel="tokens / s", title="Evaluation throughput")
    for ax in axes:
        ax.set_xlabel("")
        ax.tick_params(axis="x", labelsize=8)
    return fig


def _grid(frame: pd.DataFrame, by: str, rows: list[str], size: tuple[float, float]) -> tuple:
    """A row of panels per `by` value, a column per task; (figure, non-empty panels)."""
    tasks = sorted(frame["task"].unique(), key=TASK_NAMES.index)
    figsize = (size[0] * len(tasks), size[1] * len(rows))
    fig, axes = plt.subplots(len(rows), len(tasks), squeeze=False, figsize=figsize)
    panels = []
    for row_axes, key in zip(axes, rows, strict=True):
        for ax, task in zip(row_axes, tasks, strict=True):
            part = frame[(frame[by] == key) & (frame["task"] == task)]
            if part.empty:
                ax.set_axis_off()
            else:
                panels.append((ax, key, task, part))
    return fig, panels


def fig1(frame: pd.DataFrame, calibration: Mapping[str, int | None]) -> plt.Figure:
    """Fig. 1: a row per model, tasks side by side; colour: the bits each bit list assigned."""
    fig, panels = _grid(frame, "model", sorted(frame["model"].unique()), (6.5, 4.2))
    for ax, model, task, part in panels:
        spec, limit = TASKS[task], calibration.get(task)
        cost = f"{spec.metric.name} {'increase' if spec.metric.lower_is_better else 'drop'}"
        sample = f"calibration: {'all' if limit is None else limit} {spec.calibration_unit}"
        levels = sorted(part["bits"].unique(), key=lambda b: [-int(x) for x in b.split(" / ") if x])
        palette = dict(zip(levels, sns.color_palette("viridis", len(levels)), strict=True))
        bars = {"hue": "bits", "hue_order": levels, "palette": palette, "dodge": False}
        sns.barplot(data=part, x="name", y="score", ax=ax, **bars)
        ax.legend(title=f"bits under {part['bit_lists'].iloc[0]}", fontsize=7, title_fontsize=7)
        ax.set(xlabel="pruned target", ylabel=f"sensitivity: {cost}")
        ax.tick_params(axis="x", rotation=90, labelsize=7)
        ax.set_title(f"{model}, {task}: {cost} when pruned\n{sample}", fontsize=10)
    return fig


def tradeoff_figure(points: pd.DataFrame) -> plt.Figure:
    """Quality against compression; published points in their own row, never on our axes."""
    lists = bit_order(b for b in points["bit list"] if b not in BASELINES)
    palette = dict.fromkeys(BASELINES, "black")
    palette |= dict(zip(lists, sns.color_palette("tab10"), strict=False))
    styles = list(dict.fromkeys([*BASELINES, *points["recipe / system"]]))
    markers = dict(zip(styles, "*oXs^DvPp", strict=False))
    dots = dict(x="compression", y="value", hue="bit list", style="recipe / system", s=90)
    fig, panels = _grid(points, "panel", list(dict.fromkeys(points["panel"])), (5.5, 4))
    for ax, panel, task, part in panels:
        bases = part[part["bit list"].isin(BASELINES)][:1]
        for label, value in zip(bases["bit list"], bases["value"], strict=True):
            ax.axhline(value, ls=":", c="grey", label=f"{label} level")
        hues = [b for b in palette if b in set(part["bit list"])]
        sns.scatterplot(part, hue_order=hues, palette=palette, markers=markers, ax=ax, **dots)
        ax.set(xlabel="compression ratio (FP32 = 1)", ylabel=part["metric"].iloc[0])
        ax.set_title(f"{task}: {panel}", fontsize=10)
        ax.legend(fontsize=7)
    return fig
