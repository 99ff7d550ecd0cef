"""Part 1 in the report: the FP32 baseline beside the published numbers, Table 1 (ours, then the
published), Fig. 1 (per-target sensitivity) and quality against compression."""

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from accelstudy.files import read_json
from accelstudy.layout import wildcards_of
from accelstudy.paths import RESOURCES
from accelstudy.points import bits_label
from accelstudy.recipes import RECIPES
from accelstudy.report.collect import NAN, items_of, joined
from accelstudy.report.figures import draw
from accelstudy.report.outputs import figure, output
from accelstudy.report.pages import NOTES, Section, write_csv
from accelstudy.tasks import TASKS
from accelstudy.uncertainty import ALPHA, detectable, fewest, holm, paired_difference

PERCENT_METRICS = {"accuracy"}
PAPER_BITS = ["[16,8,4]", "[8,8,4]", "[8,4,4]"]
# a baseline by the dtype it ran in (evaluation.dtype): never "FP32" for a BF16 one
BASELINE_LABELS = {"fp32": "FP32", "bfloat16": "BF16 baseline", "float16": "FP16 baseline"}
BASELINES = list(BASELINE_LABELS.values())
PUBLISHED_REAL = {"bf16-fp8": "BF16/FP8", "fp16-int8": "FP16/INT8"}
TIE_RULES = {"Gaudi2": "no", "A100": "yes"}  # how the authors' BoolQ scripts break ties
# the authors' runs that gave the leftover layer to the first groups (8/7/7); all others: the last
SPLITS_8_7_7 = {("Gaudi2", "hellaswag"), ("Gaudi2", "boolq")}
COMPRESSION = "compression ×"
PUBLISHED_FP32 = "published TinyLlama-1.1B FP32"
BASELINE_COLUMNS = ["model", "task", "protocol", "data", "metric", "ours", "±95%", PUBLISHED_FP32]
BASELINE_COLUMNS += ["tokens/s", "peak MiB"]
TABLE1_ROWS = ["model", "data", "task", "metric"]
PUBLISHED_TIDY_COLUMNS = ["task", "system", "metric", "column", "value", "compression"]
PUBLISHED_PANEL = "published: TinyLlama-1.1B (WikiText-2, HellaSwag, BoolQ)"
PUBLISHED_TITLE = (
    "Table 1, published: TinyLlama-1.1B on WikiText-2, HellaSwag, BoolQ (Gaudi2 / A100)"
)
TRADEOFF_COLUMNS = ["panel", "task", "metric", "compression", "value", "bit list"]
TRADEOFF_COLUMNS += ["recipe / system", "half", "differs"]
# our columns and the published ones under the TRADEOFF_COLUMNS names
OUR_TRADEOFF_NAMES = {"metric_compression_ratio": "compression", "bits": "bit list"}
OUR_TRADEOFF_NAMES["recipe"] = "recipe / system"
PUBLISHED_TRADEOFF_NAMES = {"column": "bit list", "system": "recipe / system"}


def collect_sensitivity(
    tables: Iterable[str | Path], assignments: Iterable[str | Path]
) -> pd.DataFrame:
    """Sensitivity tables with the bits each bit list assigned (model, task from the paths)."""
    specs: dict[tuple[str, str], list[dict]] = {}
    for path in map(Path, assignments):
        run = wildcards_of("cluster", path)
        specs.setdefault((run["model"], run["task"]), []).append(read_json(path))
    frames = []
    for path in map(Path, tables):
        model, task = map(wildcards_of("gather_sensitivity", path).__getitem__, ("model", "task"))
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


def real_weights(records: pd.DataFrame) -> tuple[pd.DataFrame, set[str]]:
    """The records of models with weights read, and the models whose weights were random (the
    record's inputs.model.source): their perplexity, accuracy and sensitivity mean nothing, so
    they never stand beside the published ones."""
    if "model_source" not in records:
        return records, set()
    random = records["model_source"] == "random"
    return records[~random], set(records.loc[random, "model"])


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


class Shown(NamedTuple):
    """A number of a record as a table shows it."""

    label: str
    key: str  # the record's metric (its items' `correct_<key>`, a ratio metric's columns)
    kind: str  # how it is shown (accuracy: in percent)
    value: float
    half: float  # half its 95% interval, shown alike (NaN: uncertainty unknown)
    system: str | None  # the published system beside it (None: all)


def metric_rows(record: pd.Series) -> list[Shown]:
    """The record's numbers: BoolQ under each tie rule of the authors' scripts, else its primary."""
    if all(pd.notna(record.get(f"metric_acc_ties_{rule}", NAN)) for rule in TIE_RULES.values()):
        tied = [(f"acc_ties_{r}", metric_label("accuracy", r), s) for s, r in TIE_RULES.items()]
        return [_shown(record, key, label, "accuracy", s) for key, label, s in tied]
    metric = record["metric"]
    return [_shown(record, metric, metric_label(metric), metric, None)]


def _shown(record: pd.Series, key: str, label: str, kind: str, system: str | None) -> Shown:
    value, stderr = record.get(f"metric_{key}", record["value"]), record.get(f"metric_{key}_stderr")
    half = display(kind, 1.96 * stderr) if pd.notna(stderr) else NAN
    return Shown(label, key, kind, display(kind, value), half, system)


def baseline_table(records: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task, protocol, data, metric): our FP32 number and the published."""
    pub = published[published["table"] == "baseline"]
    rows = []
    for _, r in records[records["stage"] == "baseline"].iterrows():
        match = pub[(pub["task"] == r["task"]) & (pub["protocol"] == r["protocol"])]
        for label, _, _, value, half, system in metric_rows(r):
            beside = match if system is None else match[match["system"] == system]
            published_values = zip(beside["value"], beside["system"], beside["split"], strict=True)
            text = "; ".join(f"{v:g} ({s}, {split})" for v, s, split in published_values) or "-"
            numbers = [label, value, half, text, round(r["tokens_per_s"], 1), r["peak_memory_mib"]]
            rows.append([*r[BASELINE_COLUMNS[:4]], *numbers, r["device"], r["system"]])
    if not rows:
        return pd.DataFrame()
    table = pd.DataFrame(rows, columns=[*BASELINE_COLUMNS, "device", "system"])
    return table.sort_values(BASELINE_COLUMNS[:3]).reset_index(drop=True)


def _wide(tidy_rows: list[dict], index: list[str], columns: Sequence[str]) -> pd.DataFrame:
    """Tidy rows -> a row per index (in order), the given columns; no columns name."""
    if not tidy_rows:
        return pd.DataFrame()
    frame = pd.DataFrame(tidy_rows)
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
    named, bits = method.str[0].map(RECIPES.get), method.str[1]  # None: a recipe not ours
    recipe = named.map(lambda r: r and r.label).fillna(method.str[0])  # as the paper labels it
    column = bits.where(named.map(lambda r: bool(r and r.simulated)), recipe + " " + bits)
    return fp32, quantized.assign(recipe=recipe, bits=bits, column=column)


def versus_baseline(records: pd.DataFrame) -> pd.DataFrame:
    """Every quantized number against its baseline's (paper protocol, same model, task and
    system) on the same items: the difference, its 95% interval, p and Holm's p across them."""
    fp32, quantized = _quantized(records)
    rows = []
    for _, ran in quantized.iterrows():
        same = (fp32[["system", "model", "task"]] == ran[["system", "model", "task"]]).all(axis=1)
        if not same.any():
            continue
        base = fp32[same].iloc[0]
        ours, theirs = items_of(ran.get("record")), items_of(base.get("record"))
        for shown, beside in zip(metric_rows(ran), metric_rows(base), strict=True):
            row = {**ran[TABLE1_ROWS[:3]], "record": ran.get("record"), "key": shown.key}
            row |= {"metric": shown.label, "quantized": ran["column"], "value": shown.value}
            row |= {"baseline": f"{beside.value} ({base['column']})"}
            if ours is None or theirs is None:
                rows.append(row | {"verdict": "uncertainty unknown: no per-item results"})
                continue
            found = paired_difference(shown.key, ours, theirs)  # NaN ends: too few items
            for name in ("difference", "ci95_low", "ci95_high"):
                found[name] = display(shown.kind, found[name])
            found["ratio"] = round(found["ratio"], 4)  # a perplexity's: ours / the baseline's
            rows.append(row | found)
    table = pd.DataFrame(rows)
    if "p" in table:
        tested = table["p"].notna().to_numpy()
        table.loc[tested, "p (Holm)"] = holm(table["p"].to_numpy()[tested]).round(4)
        told = (table["p (Holm)"] < ALPHA).map({True: "differs", False: "cannot be told from zero"})
        table["verdict"] = table["verdict"].fillna(told) if "verdict" in table else told
    return table


def table1(
    records: pd.DataFrame, bit_lists: Sequence[str] = (), versus: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Table 1, ours: a row per (model, data, task, metric) and a compression row; with
    several systems (`compare`), each system's columns side by side. `versus`: the records'
    versus_baseline, where the caller has it."""
    systems = list(dict.fromkeys(records["system"]))
    if len(systems) > 1:
        tables = {s: table1(records[records["system"] == s], bit_lists, versus) for s in systems}
        parts = [t.set_index(TABLE1_ROWS).add_prefix(f"{s}: ") for s, t in tables.items() if len(t)]
        return pd.concat(parts, axis=1).reset_index() if parts else pd.DataFrame()
    fp32, quantized = _quantized(records)
    versus = versus_baseline(records) if versus is None else versus
    held_p = versus.reindex(columns=["record", "key", "p (Holm)"])
    order = bit_order([*bit_lists, *quantized["bits"]])
    real = [recipe.label for recipe in RECIPES.values() if not recipe.simulated]
    bases = [label for label in BASELINES if label in set(fp32["column"])]
    columns = [*bases, *order, *(f"{label} {b}" for label in real for b in order)]
    tidy_rows = []
    for (model, data, task), group in quantized.groupby(["model", "data", "task"]):
        key = {"model": model, "data": data, "task": task}
        both = pd.concat([fp32[(fp32["model"] == model) & (fp32["task"] == task)], group])
        for _, r in both.iterrows():
            for shown in metric_rows(r):
                cell = {**key, "column": r["column"]}
                tidy_rows.append(cell | {"metric": shown.label, "value": shown.value})
                tidy_rows.append(cell | {"metric": f"{shown.label} ±95%", "value": shown.half})
                held = (held_p["record"] == r.get("record")) & (held_p["key"] == shown.key)
                p = held_p.loc[held, "p (Holm)"].max()  # one or none
                tidy_rows.append(cell | {"metric": f"{shown.label} p vs baseline", "value": p})
        ratios = zip(both["column"], both["metric_compression_ratio"].round(3), strict=True)
        tidy_rows += [{**key, "metric": COMPRESSION, "column": c, "value": v} for c, v in ratios]
    return _wide(tidy_rows, TABLE1_ROWS, columns)


def published_tidy(published: pd.DataFrame) -> pd.DataFrame:
    """The published Table 1 as tidy rows, FP32 included, BoolQ labelled with its tie rule."""
    table = published[published["table"] == "table1"]
    base = published[(published["table"] == "baseline") & (published["protocol"] == "paper")]
    ratios = published[published["table"] == "compression"].set_index(["system", "method"])
    rows = []
    for (task, system, split), group in table.groupby(["task", "system", "split"], sort=False):
        fp32 = base[(base["task"] == task) & (base["split"] == split)]
        first = fp32.loc[fp32["system"].isin([system, "paper"]), "value"].iloc[0]
        ties = TIE_RULES[str(system)] if TASKS[str(task)].tied else None
        metric = metric_label(group["metric"].iloc[0], ties)
        percentile = f"percentile {'8/7/7' if (system, task) in SPLITS_8_7_7 else '7/7/8'}"
        for method, value in [("FP32", first), *zip(group["method"], group["value"], strict=True)]:
            ratio = 1.0 if method == "FP32" else ratios["value"].get((percentile, method), NAN)
            rows.append((task, system, metric, PUBLISHED_REAL.get(method, method), value, ratio))
    return pd.DataFrame(rows, columns=PUBLISHED_TIDY_COLUMNS)


def published_table1(published: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as published (TinyLlama-1.1B, Gaudi2 / A100), with the compression rows."""
    ratios = published[published["table"] == "compression"].rename(columns={"method": "column"})
    fp32 = pd.DataFrame({"system": ratios["system"].unique(), "column": "FP32", "value": 1.0})
    compression = pd.concat([fp32, ratios[fp32.columns]]).assign(task="all", metric=COMPRESSION)
    rows = [*published_tidy(published).to_dict("records"), *compression.to_dict("records")]
    columns = ["FP32", *PAPER_BITS, *PUBLISHED_REAL.values()]
    return _wide(rows, ["task", "metric", "system"], columns)


def tradeoff_points(
    records: pd.DataFrame, published: pd.DataFrame, versus: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Quality against compression per (bit list, recipe), ours then the published."""
    fp32, quantized = _quantized(records)
    keys = quantized[["model", "task"]].drop_duplicates()
    ran = pd.concat([fp32.merge(keys), quantized]).rename(columns=OUR_TRADEOFF_NAMES)
    values = [display(m, v) for m, v in zip(ran["metric"], ran["value"], strict=True)]
    halves = [_shown(r, r["metric"], "", r["metric"], None).half for _, r in ran.iterrows()]
    versus = versus_baseline(records) if versus is None else versus
    verdicts = versus.reindex(columns=["record", "verdict"])
    differs = ran["record"].isin(verdicts.loc[verdicts["verdict"] == "differs", "record"])
    panel = "ours on " + ran["system"] + ": " + ran["model"] + " (" + ran["data"] + " data)"
    our_points = ran.assign(panel=panel, metric=ran["metric"].map(metric_label), value=values)
    our_points = our_points.assign(half=halves, differs=differs)
    paper = published_tidy(published).rename(columns=PUBLISHED_TRADEOFF_NAMES)
    paper = paper[paper["task"].isin(keys["task"])].dropna(subset=["compression"])
    untied = paper["metric"].str.replace(r" \(ties \w+\)", "", regex=True)
    paper = paper.assign(panel=PUBLISHED_PANEL, metric=untied).reindex(columns=TRADEOFF_COLUMNS)
    return pd.concat([our_points[TRADEOFF_COLUMNS], paper], ignore_index=True)


def baseline_figure(records: pd.DataFrame) -> plt.Figure:
    """Left: the primary metric per task and protocol; right: evaluation throughput."""
    data = records[records["stage"] == "baseline"].copy()
    data["label"] = data["task"] + "\n(" + data["protocol"] + ", " + data["data"] + ")"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    accuracy = data[data["metric"] == "accuracy"]
    if not accuracy.empty:
        labels, models = list(dict.fromkeys(accuracy["label"])), list(dict.fromkeys(data["model"]))
        bars = {"x": "label", "y": "value", "hue": "model", "order": labels, "hue_order": models}
        sns.barplot(data=accuracy, ax=axes[0], errorbar=None, **bars)
        # each bar's 95% interval (the record's standard error), and its task's chance line
        # the shown metric's own (lm-eval's HellaSwag shows acc_norm as its accuracy)
        half = 1.96 * accuracy.get("metric_accuracy_stderr", pd.Series(NAN, accuracy.index))
        for model, container in zip(models, axes[0].containers, strict=False):
            for label, bar in zip(labels, container, strict=False):
                row = (accuracy["model"] == model) & (accuracy["label"] == label)
                if row.any() and pd.notna(err := half[row].iloc[0]):
                    middle = bar.get_x() + bar.get_width() / 2
                    axes[0].errorbar(middle, bar.get_height(), yerr=err, color="black", capsize=3)
        for x, label in enumerate(labels):
            chance = 1 / (TASKS[label.split("\n")[0]].choices or 1)
            axes[0].hlines(chance, x - 0.4, x + 0.4, ls=":", color="grey")
            axes[0].annotate(f"chance {chance:.2g}", (x, chance), ha="center", va="bottom",
                             fontsize=7, color="grey")  # fmt: skip
        dtypes = ", ".join(accuracy["method"].map(lambda m: BASELINE_LABELS.get(m, m)).unique())
        axes[0].set(ylabel="accuracy (95% interval)", ylim=(0, 1),
                    title=f"Multiple-choice accuracy ({dtypes})")  # fmt: skip
    else:  # no multiple-choice task in this study: no empty axes
        axes[0].set_axis_off()
    sns.barplot(data=data, x="label", y="tokens_per_s", hue="model", ax=axes[1])
    axes[1].set(ylabel="tokens / s", title="Evaluation throughput")
    for ax in axes:
        ax.set_xlabel("")
        ax.tick_params(axis="x", labelsize=8, labelrotation=30)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
    fig.tight_layout()
    return fig


Panel = tuple[plt.Axes, str, str, pd.DataFrame]  # (axes, `by` value, task, its rows)


def _grid(
    frame: pd.DataFrame, by: str, rows: list[str], size: tuple[float, float]
) -> tuple[plt.Figure, list[Panel]]:
    """A row of panels per `by` value, a column per task; (figure, non-empty panels)."""
    tasks = sorted(frame["task"].unique(), key=list(TASKS).index)
    figsize = (size[0] * len(tasks), size[1] * len(rows))
    fig, axes = plt.subplots(len(rows), len(tasks), squeeze=False, figsize=figsize)
    panels: list[Panel] = []
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


def ties_note(frame: pd.DataFrame) -> str:
    """Weak data under Fig. 1: targets whose sensitivities are equal and whose bits still differ
    were ranked by the clustering's tie-break (their order in the model), not by a measurement."""
    said = []
    for (model, task), part in frame.groupby(["model", "task"], sort=True):
        groups = part.assign(score=part["score"].round(12)).groupby("score")["bits"]
        tied = groups.size()[groups.size() > 1]
        if tied.empty:
            continue
        split = int(tied[groups.nunique()[tied.index] > 1].sum())
        most = f"{tied.max()} at {tied.idxmax():.3g}"
        said.append(f"{model}, {task}: {int(tied.sum())} of {len(part)} targets tie (the most, "
                    f"{most}); {split} of them got their bits from the tie-break")  # fmt: skip
    return ("Weak data: " + "; ".join(said) + ". A tied target's bits follow its place in the "
            "model (a stable sort), not its sensitivity.") if said else ""  # fmt: skip


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
        bars = part.dropna(subset=["half"])  # ours: 95% intervals; * differs from the baseline
        ax.errorbar(bars["compression"], bars["value"], bars["half"], fmt="none", c="grey", lw=1)
        for x, y in part.loc[part["differs"].eq(True), ["compression", "value"]].to_numpy():
            ax.annotate("*", (x, y), xytext=(6, 4), textcoords="offset points", fontsize=12)
        ax.set(xlabel="compression ratio (FP32 = 1)", ylabel=part["metric"].iloc[0])
        ax.set_title(f"{task}: {panel}", fontsize=10)
        ax.legend(fontsize=7)
    return fig


def versus_figure(versus: pd.DataFrame) -> plt.Figure:
    """The paired comparisons as a forest plot: each quantized number's difference from its
    baseline's on the same items with its 95% interval (hollow: too few items for one), a panel
    per task and metric, a line at zero; red where it differs after Holm's correction."""
    tested = versus.dropna(subset=["difference"])
    panels = list(dict.fromkeys(zip(tested["task"], tested["metric"], strict=True)))
    rows = max(len(tested[(tested["task"] == t) & (tested["metric"] == m)]) for t, m in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 0.35 * rows + 1.3))
    for ax, (task, metric) in zip(getattr(axes, "flat", [axes]), panels, strict=True):
        part = tested[(tested["task"] == task) & (tested["metric"] == metric)]
        many = part["model"].nunique() > 1
        for y, (_, row) in enumerate(part.iloc[::-1].iterrows()):
            low, high = row["difference"] - row["ci95_low"], row["ci95_high"] - row["difference"]
            colour = "tab:red" if row["verdict"] == "differs" else "tab:grey"
            face = colour if pd.notna(low) else "white"  # hollow: too few items for an interval
            ax.errorbar(row["difference"], y, xerr=[[low], [high]], fmt="o", c=colour, mfc=face,
                        capsize=3)  # fmt: skip
        labels = [
            f"{r['model']} {r['quantized']}" if many else r["quantized"] for _, r in part.iterrows()
        ]
        ax.set_yticks(range(len(part)), labels[::-1], fontsize=8)
        ax.axvline(0, c="black", lw=0.8)
        ax.set_title(f"{task}: {metric}", fontsize=10)
        ax.set_xlabel("quantized minus baseline, 95% interval", fontsize=8)
    fig.tight_layout()
    return fig


def versus_finding(versus: pd.DataFrame) -> str:
    """The summary's line: how many quantized numbers differ from the baseline's."""
    verdicts = versus.get("verdict", pd.Series(dtype=str))
    differs = versus[verdicts == "differs"]
    named = "; ".join(f"{r['task']} {r['metric']} {r['quantized']}" for _, r in differs.iterrows())
    unsure = int((verdicts == "cannot be told from zero").sum())
    return (f"Quantization: {len(differs)} of {len(versus)} quantized numbers differ from the "
            f"baseline's on the same items ({named or 'none'}); {unsure} cannot be told from zero "
            "with these items.")  # fmt: skip


def told(versus: pd.DataFrame, records: pd.DataFrame) -> str:
    """In words: which quantized numbers differ from the baseline's, which the data cannot tell
    from zero, and per task the smallest difference its items could detect."""
    smallest_found: list[str] = []
    fp32, _ = _quantized(records)
    tests = int(versus.get("p", pd.Series()).notna().sum())
    least = fewest(tests)  # below it no exact test here can say 'differs' after Holm
    for _, base in fp32.iterrows():
        for shown in metric_rows(base):
            if pd.notna(shown.half):
                unit = "items" if pd.notna(base.get("metric_items", NAN)) else "blocks"
                count = base[f"metric_{unit}"]
                smallest = f"{detectable(shown.half / 1.96):.3g}" if count >= least else "none"
                smallest_found.append(
                    f"{base['task']} {shown.label} ({count:.0f} {unit}): {smallest}"
                )
    said = [NOTES["versus"].format(tests=tests, fewest=least)]
    said.append("; ".join(smallest_found or ["unknown"]) + ".")
    verdicts = versus.get("verdict", pd.Series(dtype=str))
    named = versus[verdicts == "differs"]  # the rest, each in the figure, counted
    names = [f"{r['task']} {r['metric']} {r['quantized']}" for _, r in named.iterrows()]
    said.append(f"Differs: {'; '.join(names) or 'none'}.")
    unsure = int((verdicts == "cannot be told from zero").sum())
    said.append(f"Cannot be told from zero: {unsure} of {len(versus)} (the figure).")
    return " ".join(said)


def sections(
    records: pd.DataFrame,
    folder: Path,
    sensitivity: Iterable[str | Path] = (),
    assignments: Iterable[str | Path] = (),
    calibration: Mapping[str, int | None] | None = None,
    bit_lists: Sequence[Sequence[int]] = (),
) -> list[Section]:
    """The baseline and, where PTQ ran, Table 1 (ours, then the published), Fig. 1 and the
    trade-off; their tables and figures are written in every study (the rule declares them)."""
    published = load_published()
    records, random = real_weights(records)
    baseline = baseline_table(records, published)
    versus = versus_baseline(records)  # reads the items once for Table 1, the figure, the words
    our_table1 = table1(records, [bits_label(b) for b in bit_lists], versus)
    published_table = published_table1(published)
    tables = {"baseline_table": baseline, "table1": our_table1, "table1_published": published_table}
    for name, table in tables.items():
        write_csv(table, output(folder, name))
    evaluated = records[records["stage"] == "baseline"]
    draw(output(folder, "baseline_figure"), "no baseline records", baseline_figure, evaluated)
    sensitive = collect_sensitivity(sensitivity, assignments)
    if random and "model" in sensitive:
        sensitive = sensitive[~sensitive["model"].isin(random)]
    empty = "no sensitivity tables in this study"
    draw(output(folder, "fig1"), empty, fig1, sensitive, calibration or {})
    tested = versus.dropna(subset=["difference"]) if "difference" in versus else pd.DataFrame()
    draw(output(folder, "versus_figure"), "no paired comparisons", versus_figure, tested)
    points = tradeoff_points(records, published, versus)
    draw(output(folder, "tradeoff"), "no quantized records in this study", tradeoff_figure, points)
    standin = NOTES["standin"] if (records["data"] == "stand-in").any() else ""
    title = "Baseline (FP32) beside the published numbers"
    shown = [Section(title, standin, baseline, figure("baseline_figure"))] if len(baseline) else []
    if our_table1.empty:
        return shown
    quantized = records[records["stage"] == "quantized"]
    measured_on = f"{joined(quantized['model'])}; {joined(quantized['data'])}"
    table1_title = f"Table 1, ours ({measured_on} data): mixed-precision PTQ"
    fig1_title = "Fig. 1: pruning sensitivity, tasks side by side"
    versus_title = "Quantized against the baseline, item by item"
    return [
        *shown,
        Section(table1_title, NOTES["table1"], our_table1),
        Section(
            versus_title,
            told(versus, records),
            versus.drop(columns=["record", "key"]),
            figure("versus_figure") if len(tested) else "",
            finding=versus_finding(versus),
        ),
        Section(PUBLISHED_TITLE, NOTES["published"], published_table),
        *(
            [Section(fig1_title, ties_note(sensitive), figure=figure("fig1"))]
            if len(sensitive)
            else []
        ),
        Section("Quality against compression", NOTES["tradeoff"], figure=figure("tradeoff")),
    ]
