"""Records (one JSON per job) -> one tidy table; the report's tables, beside the published."""

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import yaml

from accelstudy.accounting import ran_during
from accelstudy.paths import RESOURCES
from accelstudy.points import bits_label

NOTES = yaml.safe_load(Path(__file__).with_name("notes.yaml").read_text())  # the prose
SOURCE_LABELS = {"standin": "stand-in", "hf": "Hugging Face", "local": "local file"}
WHAT = ("study", "stage", "system", "device", "model", "task", "method")
# a fine-tuning or SR3 point's parameters the tables group by, and the per-rank model-state bytes
POINT_KEYS = ("strategy", "attention", "cards", "devices", "repeat", "seed", "max_steps")
POINT_KEYS += ("per_device_batch", "grad_accum", "max_seq_length", "dtype")
MODEL_STATE_KEYS = ("params_trainable", "params_frozen", "grads", "master_fp32", "optimizer_states")
Files = Iterable[str | Path]
# the report's tables: ours beside the published numbers, in the paper's order and layout
PERCENT_METRICS = {"accuracy"}
PAPER_BITS = ["[16,8,4]", "[8,8,4]", "[8,4,4]"]
# the real recipes (ours by name, the published by method key) as the paper labels them
RECIPE_LABELS = {"fake": "simulated", "nvidia": "FP16/INT8", "fp8": "BF16/FP8", "bf16": "BF16"}
# a baseline by the dtype it ran in (evaluation.dtype): never "FP32" for a BF16 one
BASELINE_LABELS = {"fp32": "FP32", "bfloat16": "BF16 baseline", "float16": "FP16 baseline"}
PUBLISHED_REAL = {"bf16-fp8": "BF16/FP8", "fp16-int8": "FP16/INT8"}
TIE_RULES = {"Gaudi2": "no", "A100": "yes"}  # how the authors' BoolQ scripts break ties
TIED_TASKS = {"boolq"}
# STUDY.md: these runs gave the leftover layer to the first groups (8/7/7), all others to the last
SPLITS_8_7_7 = {("Gaudi2", "hellaswag"), ("Gaudi2", "boolq")}
COMPRESSION = "compression ×"
NAN = float("nan")
THEIRS = "published TinyLlama-1.1B FP32"
BASELINE = ["model", "task", "protocol", "data", "metric", "ours", THEIRS, "tokens/s", "peak MiB"]
LONG = ["task", "system", "metric", "column", "value", "compression"]  # the published Table 1
PUBLISHED_PANEL = "published: TinyLlama-1.1B (WikiText-2, HellaSwag, BoolQ)"
TRADEOFF = ["panel", "task", "metric", "compression", "value", "bit list", "recipe / system"]
# our columns and the published ones under the TRADEOFF names
OURS = {"metric_compression_ratio": "compression", "bits": "bit list", "recipe": "recipe / system"}
PUBLISHED = {"column": "bit list", "system": "recipe / system"}


def flatten(record: dict) -> dict:
    """A record's table columns; numeric metrics (nested ones too) become metric_* columns."""
    metrics, provenance = record["metrics"], record["provenance"]
    primary = metrics.get("primary_metric")
    rank0 = (metrics.get("model_state_bytes") or [{}])[0]
    resumed = metrics.get("clean_measurement") is False  # shown, but its speed is not clean
    row = {
        **{key: record[key] for key in WHAT},
        "protocol": record.get("protocol", ""),
        "data": SOURCE_LABELS.get(record["data_source"], record["data_source"]),
        "metric": primary,
        "value": metrics.get(primary) if primary else None,
        "tokens_per_s": metrics.get("tokens_per_s", NAN),
        "peak_memory_mib": round(metrics.get("peak_memory_bytes", NAN) / 2**20, 1),
        "status": "ok-resumed" if resumed else metrics.get("status", ""),
        "held_out_for": metrics.get("held_out_for", ""),
        "peak_memory_method": metrics.get("peak_memory_method", ""),
        **{key: record["parameters"].get(key) for key in POINT_KEYS},
        "model_states_rank0": sum(rank0.get(key, NAN) for key in MODEL_STATE_KEYS),
        "wall_time_s": metrics["wall_time_s"],
        "losses": metrics.get("losses") if record["stage"] == "finetune" else None,
        **energy_and_cost(record),
        **utilization(record),
        "slurm_job": provenance.get("scheduler", {}).get("job_id", ""),
        "finished_at": provenance.get("finished_at", ""),
        **{key: provenance[key] for key in ("git_commit", "config_hash")},
        "device_name": provenance["hardware"].get("device_name", ""),
    }
    for key, value in metrics.items():
        for name, number in value.items() if isinstance(value, dict) else [("", value)]:
            column = f"{key}_{name}" if name else key
            if isinstance(number, int | float) and column not in row:
                row[f"metric_{column}"] = number
    return row


def energy_and_cost(record: dict) -> dict:
    """Energy's status and joules per token (or image); the charged units, their unit, and the
    charge per 1M tokens (1k images) at the measured rate: units per hour over work per hour."""
    energy, cost, metrics = record.get("energy") or {}, record.get("cost") or {}, record["metrics"]
    row = {"energy": energy.get("status", "not recorded")}
    row |= {f"j_per_{unit}": energy.get(f"j_per_{unit}", NAN) for unit in ("token", "image")}
    row |= {"cost_units": cost.get("units", NAN), "cost_hours": cost.get("hours", NAN)}
    row["cost_unit"] = cost.get("unit", cost.get("status", "not recorded"))
    hourly = row["cost_units"] / row["cost_hours"] if row["cost_hours"] else NAN
    row["cost_per_mtok"] = hourly / 3600 / metrics.get("tokens_per_s", NAN) * 1e6
    row["cost_per_kimage"] = hourly / 3600 / metrics.get("images_per_s", NAN) * 1e3
    return row


def utilization(record: dict) -> dict:
    """The dtype that computed, achieved model TFLOP/s, the fraction of peak and its source."""
    use = record.get("utilization") or {}
    row = {
        "compute_dtype": use.get("dtype") or "",
        "peak_source": use.get("source", "not recorded"),
    }
    row["achieved_tflops"] = (use.get("achieved_flops_per_s") or NAN) / 1e12
    row["peak_tflops"] = (use.get("flops_per_s") or NAN) / 1e12
    return row | {"mfu": NAN if use.get("mfu") is None else use["mfu"]}


def with_scheduler_figures(records: pd.DataFrame, accounted: dict[str, dict]) -> pd.DataFrame:
    """`sacct`'s elapsed seconds and joules (accounting.query) beside the in-job figures, and
    the charge over the elapsed time the scheduler saw, for a SLURM job that was one record's
    alone (a group job's time is its records' together) and that ran when the record was written."""
    jobs, written = records["slurm_job"], records["finished_at"]
    alone = jobs.map(jobs.value_counts()) == 1
    found = [
        accounted[job] if one and job in accounted and ran_during(accounted[job], at) else {}
        for job, one, at in zip(jobs, alone, written, strict=True)
    ]
    elapsed = pd.Series([f.get("elapsed_s", NAN) for f in found], index=records.index, dtype=float)
    energy = [f.get("energy_j") or NAN for f in found]
    records = records.assign(sacct_elapsed_s=elapsed, sacct_energy_j=energy)
    scaled = elapsed.notna() & (records["cost_hours"] > 0)
    per_hour = records["cost_units"] / records["cost_hours"]
    records.loc[scaled, "cost_hours"] = elapsed[scaled] / 3600
    records.loc[scaled, "cost_units"] = per_hour[scaled] * elapsed[scaled] / 3600
    return records


def collect_records(paths: Files) -> pd.DataFrame:
    """One row per record, with its path (files written beside it, such as SR3 samples)."""
    paths = sorted(map(str, paths))
    return pd.DataFrame([{**flatten(json.loads(Path(p).read_text())), "record": p} for p in paths])


def collect_sensitivity(tables: Files, assignments: Files) -> pd.DataFrame:
    """Sensitivity tables with the bits each bit list assigned (model, task from the paths)."""
    specs: dict[tuple[str, str], list[dict]] = {}
    for path in map(Path, assignments):
        key = (path.parents[3].name, path.parents[2].name)
        specs.setdefault(key, []).append(json.loads(path.read_text()))
    frames = []
    for path in map(Path, tables):
        model, task = path.parents[2].name, path.parents[1].name
        found = {bits_label(s["bits"]): s for s in specs.get((model, task), [])}
        order = bit_order(found)
        frame = pd.read_csv(path).assign(model=model, bit_lists=" / ".join(order))
        targets = zip(frame["name"], frame["layer"], strict=True)
        frame["bits"] = [" / ".join(str(_assigned(found[b], *t)) for b in order) for t in targets]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _assigned(spec: dict, name: str, layer: int) -> int:
    """The bits an assignment gives one pruned target (a layer, or a module of one)."""
    return spec["module_bits"][name] if "module_bits" in spec else spec["layer_bits"][str(layer)]


def joined(values: Iterable[str]) -> str:
    """The distinct values in order of appearance, as "a, b"."""
    return ", ".join(dict.fromkeys(values))


def ours_note(runs: pd.DataFrame, ours: str, unit: str, standin: str, *after: str) -> str:
    """What our numbers are: `ours`, then what CPU `unit`s and stand-in data mean where used."""
    cpu = f"A {unit} is a CPU process (gloo), not an accelerator."
    said = {cpu: runs["device"].eq("cpu").any(), standin: runs["data"].eq("stand-in").any()}
    return " ".join([ours, *(text for text, used in said.items() if used), *after])


def load_published() -> pd.DataFrame:
    return pd.read_csv(RESOURCES / "published.csv", dtype={"split": str})


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
    """(label, shown value, the published system beside it; None: all) per record number."""
    ties = {s: record.get(f"metric_acc_ties_{rule}") for s, rule in TIE_RULES.items()}
    if all(pd.notna(v) for v in ties.values()):
        label = {s: metric_label("accuracy", rule) for s, rule in TIE_RULES.items()}
        return [(label[s], display("accuracy", v), s) for s, v in ties.items()]
    return [(metric_label(record["metric"]), display(record["metric"], record["value"]), None)]


def baseline_table(records: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task, protocol, data, metric): our FP32 number and the published."""
    pub = published[published["table"] == "baseline"]
    rows = []
    for _, r in records[records["stage"] == "baseline"].iterrows():
        match = pub[(pub["task"] == r["task"]) & (pub["protocol"] == r["protocol"])]
        for label, value, system in metric_rows(r):
            shown = match if system is None else match[match["system"] == system]
            theirs = zip(shown["value"], shown["system"], shown["split"], strict=True)
            text = "; ".join(f"{v:g} ({s}, {split})" for v, s, split in theirs) or "-"
            numbers = [label, value, text, round(r["tokens_per_s"], 1), r["peak_memory_mib"]]
            rows.append([*r[BASELINE[:4]], *numbers, r["device"]])
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows, columns=[*BASELINE, "device"])
    return table.sort_values(BASELINE[:3]).reset_index(drop=True)


def _wide(long: list[dict], index: list[str], columns: Sequence[str]) -> pd.DataFrame:
    """Long rows -> a row per index (in order), the given columns; no columns name."""
    if not long:
        return pd.DataFrame()
    frame = pd.DataFrame(long)
    rows = pd.MultiIndex.from_frame(frame[index].drop_duplicates())
    wide = frame.pivot_table(index=index, columns="column", values="value", aggfunc="first")
    wide = wide.reindex(index=rows, columns=[c for c in columns if c in wide.columns])
    return wide.rename_axis(columns=None).reset_index()


def _quantized(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Baseline (paper protocol) and quantized records with recipe, bit list, Table 1 column."""
    fp32 = records[(records["stage"] == "baseline") & (records["protocol"] == "paper")]
    label = fp32["method"].replace(BASELINE_LABELS)
    fp32 = fp32.assign(column=label, bits=label, recipe=label, metric_compression_ratio=1.0)
    quantized = records[records["stage"] == "quantized"]
    method = quantized["method"].str.split(" ")
    recipe, bits = method.str[0].map(lambda r: RECIPE_LABELS.get(r, r)), method.str[1]
    column = bits.where(recipe == RECIPE_LABELS["fake"], recipe + " " + bits)
    return fp32, quantized.assign(recipe=recipe, bits=bits, column=column)


def table1(records: pd.DataFrame, bit_lists: Sequence[str] = ()) -> pd.DataFrame:
    """Table 1, ours: a row per (model, data, task, metric) and a compression row."""
    fp32, quantized = _quantized(records)
    order = bit_order([*bit_lists, *quantized["bits"]])
    real = [label for recipe, label in RECIPE_LABELS.items() if recipe != "fake"]
    bases = [label for label in BASELINE_LABELS.values() if label in set(fp32["column"])]
    columns = [*bases, *order, *(f"{label} {b}" for label in real for b in order)]
    long = []
    for (model, data, task), group in quantized.groupby(["model", "data", "task"]):
        key = {"model": model, "data": data, "task": task}
        both = pd.concat([fp32[(fp32["model"] == model) & (fp32["task"] == task)], group])
        for _, r in both.iterrows():
            for label, value, _ in metric_rows(r):
                long.append({**key, "metric": label, "column": r["column"], "value": value})
        ratios = zip(both["column"], both["metric_compression_ratio"].round(3), strict=True)
        long += [{**key, "metric": COMPRESSION, "column": c, "value": v} for c, v in ratios]
    return _wide(long, ["model", "data", "task", "metric"], columns)


def published_long(published: pd.DataFrame) -> pd.DataFrame:
    """The published Table 1 as tidy rows, FP32 included, BoolQ labelled with its tie rule."""
    table = published[published["table"] == "table1"]
    base = published[(published["table"] == "baseline") & (published["protocol"] == "paper")]
    ratios = published[published["table"] == "compression"].set_index(["system", "method"])
    rows = []
    for (task, system, split), group in table.groupby(["task", "system", "split"], sort=False):
        fp32 = base[(base["task"] == task) & (base["split"] == split)]
        first = fp32.loc[fp32["system"].isin([system, "paper"]), "value"].iloc[0]
        ties = TIE_RULES[system] if task in TIED_TASKS else None
        metric = metric_label(group["metric"].iloc[0], ties)
        percentile = f"percentile {'8/7/7' if (system, task) in SPLITS_8_7_7 else '7/7/8'}"
        for method, value in [("FP32", first), *zip(group["method"], group["value"], strict=True)]:
            ratio = 1.0 if method == "FP32" else ratios["value"].get((percentile, method), NAN)
            rows.append((task, system, metric, PUBLISHED_REAL.get(method, method), value, ratio))
    return pd.DataFrame(rows, columns=LONG)


def published_table1(published: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as published (TinyLlama-1.1B, Gaudi2 / A100), with the compression rows."""
    ratios = published[published["table"] == "compression"].rename(columns={"method": "column"})
    fp32 = pd.DataFrame({"system": ratios["system"].unique(), "column": "FP32", "value": 1.0})
    compression = pd.concat([fp32, ratios[fp32.columns]]).assign(task="all", metric=COMPRESSION)
    long = [*published_long(published).to_dict("records"), *compression.to_dict("records")]
    columns = ["FP32", *PAPER_BITS, *PUBLISHED_REAL.values()]
    return _wide(long, ["task", "metric", "system"], columns)


def tradeoff_points(records: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Quality against compression per (bit list, recipe), ours then the published."""
    fp32, quantized = _quantized(records)
    keys = quantized[["model", "task"]].drop_duplicates()
    ours = pd.concat([fp32.merge(keys), quantized])
    pub = published_long(published).dropna(subset=["compression"])
    pub = pub[pub["task"].isin(keys["task"])]
    shown = [display(m, v) for m, v in zip(ours["metric"], ours["value"], strict=True)]
    panel = "ours: " + ours["model"] + " (" + ours["data"] + " data)"
    mine = ours.assign(panel=panel, metric=ours["metric"].map(metric_label), value=shown)
    metric = pub["metric"].str.replace(r" \(ties \w+\)", "", regex=True)
    theirs = pub.assign(panel=PUBLISHED_PANEL, metric=metric)
    frames = [mine.rename(columns=OURS), theirs.rename(columns=PUBLISHED)]
    return pd.concat([frame[TRADEOFF] for frame in frames], ignore_index=True)
