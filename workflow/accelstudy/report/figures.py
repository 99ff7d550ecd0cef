"""Seaborn figures for the report, written as PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns


def baseline_figure(records: pd.DataFrame, out: Path) -> Path:
    """Left: the primary metric per task and protocol; right: evaluation throughput."""
    data = records[records["stage"] == "baseline"].copy()
    data["label"] = data["task"] + "\n(" + data["protocol"] + ", " + data["data"] + ")"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    accuracy = data[data["metric"] == "accuracy"]
    if not accuracy.empty:
        sns.barplot(data=accuracy, x="label", y="value", hue="model", ax=axes[0])
        axes[0].set_ylabel("accuracy")
        axes[0].set_ylim(0, 1)
        axes[0].axhline(0.25, ls=":", c="grey")
        axes[0].set_title("Multiple-choice accuracy (FP32)")
    sns.barplot(data=data, x="label", y="tokens_per_s", hue="model", ax=axes[1])
    axes[1].set_ylabel("tokens / s")
    axes[1].set_title("Evaluation throughput")
    for ax in axes:
        ax.set_xlabel("")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def sensitivity_figure(frame: pd.DataFrame, out: Path, bits: list[int]) -> Path:
    """Fig. 1 style: sensitivity per layer, coloured by the precision it was assigned."""
    fig, ax = plt.subplots(figsize=(10, 4))
    palette = dict(
        zip(
            sorted(set(bits), reverse=True),
            sns.color_palette("viridis", len(set(bits))),
            strict=True,
        )
    )
    sns.barplot(data=frame, x="name", y="score", hue="bits", palette=palette, dodge=False, ax=ax)
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("sensitivity (larger = more sensitive)")
    ax.set_title(f"Pruning sensitivity and assigned bits {bits}")
    ax.tick_params(axis="x", rotation=90, labelsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
