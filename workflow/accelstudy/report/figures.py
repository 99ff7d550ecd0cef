"""Seaborn figures for the report, written as PNG, and the helpers every part's figures share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from accelstudy.report.tables import bit_order
from accelstudy.tasks import TASK_NAMES, TASKS

# the median of the repeats, error bars min-max
SPREAD = {"estimator": "median", "errorbar": ("pi", 100)}


def save(fig: plt.Figure, out: Path) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def placeholder(out: Path, text: str) -> Path:
    """A figure that says why there is nothing to show (the rule declares it regardless)."""
    fig, ax = plt.subplots(figsize=(6, 1))
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center")
    return save(fig, out)


def draw(out: Path, why_not: str, make: Callable[..., plt.Figure], *args: Any) -> Path:
    """The figure make(*args) draws, or a placeholder saying `why_not` where that is set."""
    return placeholder(out, why_not) if why_not else save(make(*args), out)


def baseline_figure(records: pd.DataFrame) -> plt.Figure:
    """Left: the primary metric per task and protocol; right: evaluation throughput."""
    data = records[records["stage"] == "baseline"].copy()
    data["label"] = data["task"] + "\n(" + data["protocol"] + ", " + data["data"] + ")"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    accuracy = data[data["metric"] == "accuracy"]
    if not accuracy.empty:
        sns.barplot(data=accuracy, x="label", y="value", hue="model", ax=axes[0])
        axes[0].set(ylabel="accuracy", ylim=(0, 1), title="Multiple-choice accuracy (FP32)")
        axes[0].axhline(0.25, ls=":", c="grey")
    sns.barplot(data=data, x="label", y="tokens_per_s", hue="model", ax=axes[1])
    axes[1].set(ylabel="tokens / s", title="Evaluation throughput")
    for ax in axes:
        ax.set_xlabel("")
        ax.tick_params(axis="x", labelsize=8)
    return fig


def score_label(task: str) -> str:
    """What pruning costs on the task's metric: an increase where lower is better, else a drop."""
    metric = TASKS[task].metric
    return f"{metric.name} {'increase' if metric.lower_is_better else 'drop'}"


def calibration_text(task: str, limit: int | None) -> str:
    return f"calibration: {'all' if limit is None else limit} {TASKS[task].calibration_unit}"


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
        levels = sorted(part["bits"].unique(), key=lambda b: [-int(x) for x in b.split(" / ") if x])
        palette = dict(zip(levels, sns.color_palette("viridis", len(levels)), strict=True))
        bars = {"hue": "bits", "hue_order": levels, "palette": palette, "dodge": False}
        sns.barplot(data=part, x="name", y="score", ax=ax, **bars)
        ax.legend(title=f"bits under {part['bit_lists'].iloc[0]}", fontsize=7, title_fontsize=7)
        ax.set(xlabel="pruned target", ylabel=f"sensitivity: {score_label(task)}")
        ax.tick_params(axis="x", rotation=90, labelsize=7)
        sample = calibration_text(task, calibration.get(task))
        ax.set_title(f"{model}, {task}: {score_label(task)} when pruned\n{sample}", fontsize=10)
    return fig


def tradeoff_figure(points: pd.DataFrame) -> plt.Figure:
    """Quality against compression; published points in their own row, never on our axes."""
    lists = bit_order(b for b in points["bit list"] if b != "FP32")
    palette = {"FP32": "black", **dict(zip(lists, sns.color_palette("tab10"), strict=False))}
    styles = list(dict.fromkeys(["FP32", *points["recipe / system"]]))
    markers = dict(zip(styles, "*oXs^DvPp", strict=False))
    fig, panels = _grid(points, "panel", list(dict.fromkeys(points["panel"])), (5.5, 4))
    for ax, panel, task, part in panels:
        for value in part[part["bit list"] == "FP32"]["value"][:1]:
            ax.axhline(value, ls=":", c="grey", label="FP32 level")
        hues = [b for b in palette if b in set(part["bit list"])]
        style = {"style": "recipe / system", "markers": markers, "s": 90, "palette": palette}
        sns.scatterplot(
            data=part, x="compression", y="value", hue="bit list", hue_order=hues, ax=ax, **style
        )
        ax.set(xlabel="compression ratio (FP32 = 1)", ylabel=part["metric"].iloc[0])
        ax.set_title(f"{task}: {panel}", fontsize=10)
        ax.legend(fontsize=7)
    return fig
