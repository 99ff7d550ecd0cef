"""The report's tables: ours beside the published numbers."""

from __future__ import annotations

import pandas as pd

PERCENT_METRICS = {"accuracy"}


def _display_value(metric: str, value: float) -> float:
    return round(value * 100, 2) if metric in PERCENT_METRICS else round(value, 3)


def baseline_table(records: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task, protocol, data): our FP32 number and the published ones."""
    ours = records[records["stage"] == "baseline"].copy()
    if ours.empty:
        return ours
    ours["ours"] = [
        _display_value(m, v) for m, v in zip(ours["metric"], ours["value"], strict=True)
    ]
    pub = published[published["table"] == "baseline"]
    rows = []
    for _, r in ours.iterrows():
        match = pub[(pub["task"] == r["task"]) & (pub["protocol"] == r["protocol"])]
        published_text = "; ".join(
            f"{v:g} ({s}, {split})"
            for v, s, split in zip(match["value"], match["system"], match["split"], strict=True)
        )
        rows.append(
            {
                "model": r["model"],
                "task": r["task"],
                "protocol": r["protocol"],
                "data": r["data"],
                "metric": r["metric"] + (" %" if r["metric"] in PERCENT_METRICS else ""),
                "ours": r["ours"],
                "published TinyLlama-1.1B FP32": published_text or "-",
                "tokens/s": round(r["tokens_per_s"], 1),
                "peak MiB": r["peak_memory_mib"],
                "device": r["device"],
            }
        )
    return pd.DataFrame(rows).sort_values(["model", "task", "protocol"]).reset_index(drop=True)


def table1(records: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Table 1: each (task, bit list, recipe) beside FP32 and the published Gaudi2/A100."""
    quantized = records[records["stage"] == "quantized"]
    if quantized.empty:
        return pd.DataFrame()
    fp32 = records[(records["stage"] == "baseline") & (records["protocol"] == "paper")]
    pub = published[published["table"] == "table1"]
    rows = []
    for _, r in quantized.iterrows():
        recipe, _, bits = r["method"].partition(" ")
        base = fp32[(fp32["model"] == r["model"]) & (fp32["task"] == r["task"])]
        key = {"fake": bits, "nvidia": "fp16-int8", "fp8": "bf16-fp8"}.get(recipe, "-")
        match = pub[(pub["task"] == r["task"]) & (pub["method"] == key)]
        rows.append(
            {
                "model": r["model"],
                "task": r["task"],
                "data": r["data"],
                "bits": bits,
                "recipe": recipe,
                "metric": r["metric"] + (" %" if r["metric"] in PERCENT_METRICS else ""),
                "FP32": _display_value(r["metric"], base["value"].iloc[0]) if len(base) else None,
                "ours": _display_value(r["metric"], r["value"]),
                "compression (paper)": round(r.get("metric_compression_ratio", float("nan")), 3),
                "compression (model bytes)": round(
                    r.get("metric_model_compression_ratio", float("nan")), 3
                ),
                "tokens/s": round(r["tokens_per_s"], 1),
                "published TinyLlama-1.1B": "; ".join(
                    f"{v:g} ({s})" for v, s in zip(match["value"], match["system"], strict=True)
                )
                or "-",
            }
        )
    return (
        pd.DataFrame(rows).sort_values(["model", "task", "recipe", "bits"]).reset_index(drop=True)
    )
