"""The report's tables: ours beside the published numbers, in the paper's order and layout."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

PERCENT_METRICS = {"accuracy"}
PAPER_BITS = ["[16,8,4]", "[8,8,4]", "[8,4,4]"]
# the real recipes (ours by name, the published by method key) as the paper labels them
RECIPE_LABELS = {"fake": "simulated", "nvidia": "FP16/INT8", "fp8": "BF16/FP8", "bf16": "BF16"}
PUBLISHED_REAL = {"bf16-fp8": "BF16/FP8", "fp16-int8": "FP16/INT8"}
# BoolQ under the authors' protocol: the Gaudi scripts break ties "no", the A100 ones "yes"
TIE_RULES = {"Gaudi2": "no", "A100": "yes"}
COMPRESSION = "compression ×"


def bits_label(bits: Iterable[int]) -> str:
    """[16, 8, 4] -> "[16,8,4]", as the quantized records name their method."""
    return "[" + ",".join(str(b) for b in bits) + "]"


def bit_order(labels: Iterable[str]) -> list[str]:
    """The paper's bit lists first, in its order; then the others as given (config order)."""
    labels = list(dict.fromkeys(labels))
    return [b for b in PAPER_BITS if b in labels] + [b for b in labels if b not in PAPER_BITS]


def metric_label(metric: str, ties: str | None = None) -> str:
    label = metric + (" %" if metric in PERCENT_METRICS else "")
    return f"{label} (ties {ties})" if ties else label


def display(metric: str, value: float) -> float:
    return round(value * 100, 2) if metric in PERCENT_METRICS else round(value, 3)


def metric_rows(record: pd.Series) -> list[tuple[str, float, str | None]]:
    """(label, shown value, published system it sits beside; None: all) per number of a
    record. BoolQ paper records carry both tie rules, each beside the system that used it."""
    ties = {s: record.get(f"metric_acc_ties_{rule}") for s, rule in TIE_RULES.items()}
    if all(pd.notna(v) for v in ties.values()):
        return [(metric_label("accuracy", TIE_RULES[s]), display("accuracy", v), s)
                for s, v in ties.items()]  # fmt: skip
    return [(metric_label(record["metric"]), display(record["metric"], record["value"]), None)]


def baseline_table(records: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task, protocol, data, metric): our FP32 number and the published."""
    ours = records[records["stage"] == "baseline"]
    pub = published[published["table"] == "baseline"]
    rows = []
    for _, r in ours.iterrows():
        match = pub[(pub["task"] == r["task"]) & (pub["protocol"] == r["protocol"])]
        for label, value, system in metric_rows(r):
            shown = match if system is None else match[match["system"] == system]
            published = zip(shown["value"], shown["system"], shown["split"], strict=True)
            rows.append({
                "model": r["model"], "task": r["task"], "protocol": r["protocol"],
                "data": r["data"], "metric": label, "ours": value,
                "published TinyLlama-1.1B FP32":
                    "; ".join(f"{v:g} ({s}, {split})" for v, s, split in published) or "-",
                "tokens/s": round(r["tokens_per_s"], 1), "peak MiB": r["peak_memory_mib"],
                "device": r["device"],
            })  # fmt: skip
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).sort_values(["model", "task", "protocol"]).reset_index(drop=True)


def _wide(long: list[dict], index: list[str], columns: Sequence[str]) -> pd.DataFrame:
    """Long (index..., column, value) rows -> a row per index in order of appearance, the
    columns that occur in the given order."""
    if not long:
        return pd.DataFrame()
    frame = pd.DataFrame(long)
    rows = pd.MultiIndex.from_frame(frame[index].drop_duplicates())
    wide = frame.pivot_table(index=index, columns="column", values="value", aggfunc="first")
    return wide.reindex(index=rows, columns=[c for c in columns if c in wide.columns]).reset_index()


def _fp32(records: pd.DataFrame) -> pd.DataFrame:
    """The FP32 records quantized ones are compared with (same protocol: the paper's)."""
    return records[(records["stage"] == "baseline") & (records["protocol"] == "paper")]


def _quantized(records: pd.DataFrame) -> pd.DataFrame:
    """Quantized records with their recipe label, bit list and Table 1 column."""
    quantized = records[records["stage"] == "quantized"]
    method = quantized["method"].str.split(" ")
    recipe = method.str[0].map(lambda r: RECIPE_LABELS.get(r, r))
    bits = method.str[1]
    column = bits.where(recipe == RECIPE_LABELS["fake"], recipe + " " + bits)
    return quantized.assign(recipe=recipe, bits=bits, column=column)


def table1(records: pd.DataFrame, bit_lists: Sequence[str] = ()) -> pd.DataFrame:
    """Table 1, ours: a row per (model, data, task, metric) and a compression row; columns
    FP32, each bit list (simulated), then each real recipe per bit list."""
    quantized = _quantized(records)
    order = bit_order([*bit_lists, *quantized["bits"]])
    real = [label for recipe, label in RECIPE_LABELS.items() if recipe != "fake"]
    columns = ["FP32", *order, *(f"{label} {b}" for label in real for b in order)]
    fp32 = _fp32(records).assign(column="FP32", metric_compression_ratio=1.0)
    long = []
    for (model, data, task), group in quantized.groupby(["model", "data", "task"]):
        key = {"model": model, "data": data, "task": task}
        base = fp32[(fp32["model"] == model) & (fp32["task"] == task)]
        both = pd.concat([base, group])
        for _, r in both.iterrows():
            long += [{**key, "metric": label, "column": r["column"], "value": value}
                     for label, value, _ in metric_rows(r)]  # fmt: skip
        ratios = zip(both["column"], both["metric_compression_ratio"].round(3), strict=True)
        long += [{**key, "metric": COMPRESSION, "column": c, "value": v} for c, v in ratios]
    return _wide(long, ["model", "data", "task", "metric"], columns)


def published_split(system: str, task: str) -> str:
    """The percentile split behind a published column (STUDY.md): the Gaudi2 HellaSwag and
    BoolQ runs gave the leftover layer to the first groups (8/7/7), all others to the last."""
    return "percentile 8/7/7" if system == "Gaudi2" and task != "wikitext" else "percentile 7/7/8"


def published_long(published: pd.DataFrame) -> pd.DataFrame:
    """The published Table 1 as tidy rows (task, system, metric, column, value, compression),
    FP32 included; BoolQ accuracies are labelled with the tie rule of their scripts."""
    table = published[published["table"] == "table1"]
    base = published[(published["table"] == "baseline") & (published["protocol"] == "paper")]
    ratios = published[published["table"] == "compression"].set_index(["system", "method"])
    rows = []
    for (task, system, split), group in table.groupby(["task", "system", "split"], sort=False):
        fp32 = base[(base["task"] == task) & (base["split"] == split)
                    & base["system"].isin([system, "paper"])]  # fmt: skip
        ties = TIE_RULES[system] if task == "boolq" else None
        metric = metric_label(group["metric"].iloc[0], ties)
        methods = ["FP32", *group["method"]]
        values = [fp32["value"].iloc[0], *group["value"]]
        for method, value in zip(methods, values, strict=True):
            ratio = ratios["value"].get((published_split(system, task), method), float("nan"))
            rows.append({"task": task, "system": system, "metric": metric,
                         "column": PUBLISHED_REAL.get(method, method), "value": value,
                         "compression": 1.0 if method == "FP32" else ratio})  # fmt: skip
    return pd.DataFrame(rows)


def published_table1(published: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as published (TinyLlama-1.1B, Gaudi2 / A100), with the compression rows."""
    ratios = published[published["table"] == "compression"]
    fp32 = [(system, "FP32", 1.0) for system in ratios["system"].unique()]
    published_ratios = zip(ratios["system"], ratios["method"], ratios["value"], strict=True)
    compression = [
        {"task": "all", "system": system, "metric": COMPRESSION, "column": column, "value": value}
        for system, column, value in [*fp32, *published_ratios]
    ]
    long = published_long(published).to_dict("records") + compression
    columns = ["FP32", *PAPER_BITS, *PUBLISHED_REAL.values()]
    return _wide(long, ["task", "metric", "system"], columns)


def tradeoff_points(records: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Quality against compression for every (bit list, recipe) and FP32 (compression 1):
    ours per (model, data), then the published TinyLlama-1.1B as a panel of its own."""
    quantized = _quantized(records)
    keys = quantized[["model", "task"]].drop_duplicates()
    fp32 = _fp32(records).merge(keys)
    fp32 = fp32.assign(bits="FP32", recipe="FP32", metric_compression_ratio=1.0)
    ours = pd.concat([fp32, quantized])
    pub = published_long(published).dropna(subset=["compression"])
    pub = pub[pub["task"].isin(keys["task"])]
    shown = [display(m, v) for m, v in zip(ours["metric"], ours["value"], strict=True)]
    mine = pd.DataFrame({
        "panel": "ours: " + ours["model"] + " (" + ours["data"] + " data)", "task": ours["task"],
        "metric": ours["metric"].map(metric_label), "compression": ours["metric_compression_ratio"],
        "value": shown, "bit list": ours["bits"], "recipe / system": ours["recipe"],
    })  # fmt: skip
    theirs = pd.DataFrame({
        "panel": "published: TinyLlama-1.1B (WikiText-2, HellaSwag, BoolQ)", "task": pub["task"],
        "metric": pub["metric"].str.replace(r" \(ties \w+\)", "", regex=True),
        "compression": pub["compression"], "value": pub["value"], "bit list": pub["column"],
        "recipe / system": pub["system"],
    })  # fmt: skip
    return pd.concat([mine, theirs], ignore_index=True)
