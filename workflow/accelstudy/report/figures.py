"""Seaborn figures for the report, written as PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from accelstudy.report.tables import bit_order

SCORE_LABELS = {"perplexity": "perplexity increase", "accuracy": "accuracy drop"}
CALIBRATION_UNITS = {"wikitext": "validation blocks"}  # else: train items
PAPER_TASKS = ("wikitext", "hellaswag", "boolq")


def _tasks(frame: pd.DataFrame) -> list[str]:
    """The tasks of a frame in the paper's order, so every figure lays them out alike."""
    return sorted(frame["task"].unique(), key=PAPER_TASKS.index)


def _save(fig: plt.Figure, out: Path) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def baseline_figure(records: pd.DataFrame, out: Path) -> Path:
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
    return _save(fig, out)


def placeholder(out: Path, text: str) -> Path:
    """A figure that says why there is nothing to show (the rule declares it regardless)."""
    fig, ax = plt.subplots(figsize=(6, 1))
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center")
    return _save(fig, out)


def _bits_key(label: str) -> list[int]:
    return [-int(b) for b in label.split(" / ") if b]


def _sensitivity_bars(ax: plt.Axes, frame: pd.DataFrame, legend: str) -> None:
    """Score per target, coloured by the bits it got (most bits darkest)."""
    levels = sorted(frame["bits"].unique(), key=_bits_key)
    palette = dict(zip(levels, sns.color_palette("viridis", len(levels)), strict=True))
    sns.barplot(data=frame, x="name", y="score", hue="bits", hue_order=levels, palette=palette,
                dodge=False, ax=ax)  # fmt: skip
    ax.legend(title=legend, fontsize=7, title_fontsize=7)
    score = SCORE_LABELS[frame["metric_kind"].iloc[0]]
    ax.set(xlabel="pruned target", ylabel=f"sensitivity: {score}")
    ax.tick_params(axis="x", rotation=90, labelsize=7)


def calibration_text(task: str, limit: int | None) -> str:
    unit = CALIBRATION_UNITS.get(task, "train items")
    return f"calibration: {'all' if limit is None else limit} {unit}"


def _grid(frame: pd.DataFrame, by: str, rows: list[str], size: tuple[float, float]) -> tuple:
    """A row of panels per value of `by`, a column per task; returns the figure and the
    non-empty panels as (axes, row value, task, their rows); empty ones are switched off."""
    tasks = _tasks(frame)
    fig, axes = plt.subplots(len(rows), len(tasks), squeeze=False,
                             figsize=(size[0] * len(tasks), size[1] * len(rows)))  # fmt: skip
    panels = []
    for row_axes, key in zip(axes, rows, strict=True):
        for ax, task in zip(row_axes, tasks, strict=True):
            part = frame[(frame[by] == key) & (frame["task"] == task)]
            if part.empty:
                ax.set_axis_off()
            else:
                panels.append((ax, key, task, part))
    return fig, panels


def fig1(frame: pd.DataFrame, calibration: dict[str, int | None], out: Path) -> Path:
    """Fig. 1: a row per model, the tasks side by side on the same targets; each title names
    model, task, metric and calibration size; colour: the bits each bit list assigned."""
    fig, panels = _grid(frame, "model", sorted(frame["model"].unique()), (6.5, 4.2))
    for ax, model, task, part in panels:
        _sensitivity_bars(ax, part, f"bits under {part['bit_lists'].iloc[0]}")
        score = SCORE_LABELS[part["metric_kind"].iloc[0]]
        sample = calibration_text(task, calibration.get(task))
        ax.set_title(f"{model}, {task}: {score} when pruned\n{sample}", fontsize=10)
    return _save(fig, out)


def tradeoff_figure(points: pd.DataFrame, out: Path) -> Path:
    """Quality against compression, a panel per task and a row per panel group, so published
    points never share axes with ours; colours and markers alike in every panel, FP32 black."""
    lists = bit_order(b for b in points["bit list"] if b != "FP32")
    palette = {"FP32": "black", **dict(zip(lists, sns.color_palette("tab10"), strict=False))}
    styles = list(dict.fromkeys(["FP32", *points["recipe / system"]]))
    markers = dict(zip(styles, "*oXs^DvPp", strict=False))
    fig, panels = _grid(points, "panel", list(dict.fromkeys(points["panel"])), (5.5, 4))
    for ax, panel, task, part in panels:
        for value in part[part["bit list"] == "FP32"]["value"][:1]:
            ax.axhline(value, ls=":", c="grey", label="FP32 level")
        sns.scatterplot(data=part, x="compression", y="value", hue="bit list",
                        hue_order=[b for b in palette if b in set(part["bit list"])],
                        palette=palette, style="recipe / system", markers=markers, s=90,
                        ax=ax)  # fmt: skip
        ax.set(xlabel="compression ratio (FP32 = 1)", ylabel=part["metric"].iloc[0])
        ax.set_title(f"{task}: {panel}", fontsize=10)
        ax.legend(fontsize=7)
    return _save(fig, out)
