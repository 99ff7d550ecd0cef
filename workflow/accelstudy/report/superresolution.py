"""Part 3 of the report: Fig. 3 (ours as speed-up only), strong-scaling points, held-out images."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from accelstudy.layout import beside
from accelstudy.paths import RESOURCES
from accelstudy.report.collect import joined
from accelstudy.report.figures import draw, plain_numbers
from accelstudy.report.outputs import figure, output
from accelstudy.report.pages import NOTES, Section, our_numbers, write_csv
from accelstudy.uncertainty import SPREAD, repeats_interval

KEYS = ["system", "devices"]
FIGURES = (figure("fig3"), figure("diffusion_samples"))
PANEL = {"lr": "low-res input", "sr": "SR3 output", "bicubic": "bicubic", "hr": "truth"}
# the table's columns, in groups
POINT = {k: k for k in [*KEYS, "status", "repeats", "data"]}
TIME = {"minutes": "training minutes", "images_processed": "images trained"}
SPEED = {
    "images_per_s": "images/s", "spread": "images/s interval", "speedup": "speed-up",
    "efficiency": "scaling efficiency", "j_per_image": "J/image", "j_spread": "J/image interval",
}  # fmt: skip
COMPUTE = {"gflop": "GFLOP per image", "gflops": "achieved GFLOP/s"}
COMPUTE |= {"mfu": "MFU", "parameters": "parameters"}
SR = {"psnr_sr": "PSNR SR (dB)", "ssim_sr": "SSIM SR"}
BICUBIC = {"psnr_bicubic": "PSNR bicubic (dB)", "ssim_bicubic": "SSIM bicubic"}
TRAINING = {"final_loss": "final loss", "peak": "peak MiB (max rank)"}
COLUMNS = {**POINT, **TIME, **SPEED, **COMPUTE, **SR, **BICUBIC, **TRAINING}
# metric columns the table reads; absent from the collected records where no point ran
RUN = ["train_runtime_s", "images_per_s", "images_processed", "flops_per_image"]
METRICS = [*RUN, "achieved_flops_per_s", "parameters", *SR, *BICUBIC, "final_loss", "images"]
# Fig. 3's panels (y, log x, log y, label): the paper's minutes twice, then speed-up, efficiency
PANELS = [
    ("minutes", False, False, "minutes (published)"),
    ("minutes", True, True, "minutes (published, log-log)"),
    ("speedup", True, True, "speed-up T1 / TN"),
    ("efficiency", True, False, "scaling efficiency (speed-up / devices)"),
]


def scaling(frame: pd.DataFrame, by: str, ran: pd.DataFrame | None = None) -> pd.DataFrame:
    """With speed-up over its `by` group's median 1-device minutes (in `ran`), and efficiency."""
    ran = frame if ran is None else ran
    one = ran[ran["devices"] == 1].groupby(by)["minutes"].median()
    speedup = frame[by].map(one) / frame["minutes"]
    return frame.assign(speedup=speedup, efficiency=speedup / frame["devices"])


def diffusion_runs(records: pd.DataFrame) -> pd.DataFrame:
    """A row per SR3 record: minutes, speed-up over its system's one device, its samples npz."""
    runs = records[records["stage"] == "diffusion"]
    samples = [Path(beside(r, "samples")) for r in runs["record"]]
    runs = runs.assign(samples=pd.Series(samples, index=runs.index, dtype=object))
    if runs.empty:
        return runs
    runs = runs.assign(**{m: runs.get(f"metric_{m}", np.nan) for m in METRICS})
    runs = runs.astype({"devices": int, "repeat": int}).assign(minutes=runs["train_runtime_s"] / 60)
    runs = runs.sort_values([*KEYS, "repeat"], kind="stable").reset_index(drop=True)
    return scaling(runs, "system", runs[runs["status"] == "ok"])


def diffusion_table(runs: pd.DataFrame) -> pd.DataFrame:
    """A row per (system, devices), as tables/diffusion.csv shows it (headed where empty)."""
    if runs.empty:
        return pd.DataFrame(columns=list(COLUMNS.values()))
    ok = runs[runs["status"] == "ok"].assign(peak=runs["peak_memory_mib"])
    medians = ok.groupby(KEYS)[["minutes", "mfu", "j_per_image", *METRICS]].median()
    points = runs.groupby(KEYS).agg(
        status=("status", joined), repeats=("status", "size"), data=("data", joined)
    )
    spreads = ok.groupby(KEYS)[["images_per_s", "j_per_image"]].agg(repeats_interval)
    spreads = spreads.set_axis(["spread", "j_spread"], axis=1)
    points = points.join([medians, spreads, ok.groupby(KEYS)["peak"].max()]).reset_index()
    gflop, gflops = points["flops_per_image"] / 1e9, points["achieved_flops_per_s"] / 1e9
    points = scaling(points, "system").assign(gflop=gflop, gflops=gflops)
    counts = {"images trained": "Int64", "parameters": "Int64"}
    return points[list(COLUMNS)].rename(columns=COLUMNS).round(3).astype(counts)


def published() -> pd.DataFrame:
    """The paper's minutes (Fig. 3), with each accelerator's speed-up against its own 1."""
    return scaling(pd.read_csv(RESOURCES / "diffusion_minutes.csv"), "device")


def fig3(runs: pd.DataFrame, paper: pd.DataFrame) -> plt.Figure:
    """The published minutes (linear, log-log); speed-up and efficiency, theirs and ours."""
    ok = runs[runs["status"] == "ok"].dropna(subset=["speedup"])
    ok = ok.assign(line="ours: " + ok["system"])
    colours = ["black", *sns.color_palette("Dark2")]
    palette = dict(zip(dict.fromkeys(ok["line"]), colours, strict=False))
    lines = {"hue": "line", "palette": palette, "marker": "s", "err_style": "bars"}
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    ticks = sorted({*paper["devices"], *runs["devices"]})
    labels = [str(t) for t in ticks]
    for ax, (y, logx, logy, label) in zip(axes.flat, PANELS, strict=True):
        if y == "speedup":
            ax.plot([1, ticks[-1]], [1, ticks[-1]], "k:", label="ideal")
        elif y == "efficiency":
            ax.axhline(1, c="k", ls=":", label="ideal")
        sns.lineplot(data=paper, x="devices", y=y, hue="device", marker="o", ax=ax)
        if y != "minutes" and not ok.empty:
            sns.lineplot(data=ok, x="devices", y=y, ax=ax, linewidth=2.5, **lines, **SPREAD)
        if logx:
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, labels)
        if logy:
            ax.set_yscale("log", base=2 if y == "speedup" else 10)
            plain_numbers(ax)
        if y == "speedup":
            ax.set_yticks(ticks, labels)
        ax.set(xlabel="devices", ylabel=label)
        ax.legend(fontsize=7)
    axes[0, 0].set_title("SR3 training time for fixed work (published)")
    axes[1, 0].set_title("Speed-up: each against its own single device")
    return fig


def samples_figure(runs: pd.DataFrame) -> plt.Figure:
    """The first run's held-out images (up to 4), PSNR per image (range 2: [-1, 1], as scored)."""
    run = runs.iloc[0]
    with np.load(run["samples"]) as npz:
        images = {k: npz[k][:4, 0] for k in PANEL}
    count = len(images["hr"])
    fig, axes = plt.subplots(count, 4, squeeze=False, figsize=(10, 2.6 * count + 0.6))
    for i, row in enumerate(axes):
        for ax, (key, title) in zip(row, PANEL.items(), strict=True):
            image, truth = images[key][i], images["hr"][i]
            ax.imshow(image, cmap="inferno", vmin=-1, vmax=1, interpolation="nearest")
            ax.set_axis_off()
            if key in ("sr", "bicubic"):
                title += f": {10 * np.log10(4 / np.mean((image - truth) ** 2)):.1f} dB"
            ax.set_title(title, fontsize=9)
    sr = f"PSNR/SSIM SR {run['psnr_sr']:.2f} dB/{run['ssim_sr']:.3f}"
    bicubic = f"bicubic {run['psnr_bicubic']:.2f} dB/{run['ssim_bicubic']:.3f}"
    point = f"{run['system']}, {run['devices']} device(s), repeat {run['repeat']}"
    fig.suptitle(f"{point}: mean over {run['images']:.0f} images, {sr}, {bicubic}", fontsize=9)
    return fig


def write_figures(runs: pd.DataFrame, folder: Path) -> None:
    """Fig. 3 and the samples, or placeholders saying why (the rule declares both)."""
    no_records = "no diffusion records in this study"
    draw(folder / FIGURES[0], no_records, fig3, runs, published())
    sampled = runs["samples"].map(lambda p: p.is_file() and p.stat().st_size > 0)
    found = runs[(runs["status"] == "ok") & sampled]
    why_empty = no_records if runs.empty else "no SR3 samples: no point ran"
    draw(folder / FIGURES[1], why_empty, samples_figure, found)


def sr3_finding(table: pd.DataFrame) -> str:
    """The summary's line: each system's speed-up on its most devices, and how many repeats."""
    said = []
    for system, part in table.dropna(subset=["speed-up"]).groupby("system", sort=False):
        top = part.sort_values("devices").iloc[-1]
        repeats = f"{top['repeats']:.0f} repeat{'s' if top['repeats'] != 1 else ''}"
        said.append(f"{system}: {top['speed-up']:.2f}x on {top['devices']:.0f} devices against "
                    f"1 (efficiency {top['scaling efficiency']:.0%}, {repeats})")  # fmt: skip
    return f"SR3: {'; '.join(said)}." if said else ""


def sections(records: pd.DataFrame, folder: Path) -> list[Section]:
    """Fig. 3, the SR3 points and the samples; the table and figures are written in every study."""
    runs = diffusion_runs(records)
    table = diffusion_table(runs)
    write_csv(table, output(folder, "diffusion_table"))
    write_figures(runs, output(folder, "fig3").parent)
    if runs.empty:
        return []
    title = "Fig. 3: SR3 training time for fixed work against devices"
    points = "SR3 points: speed-up, scaling efficiency, throughput and image quality"
    parameters, systems = runs["parameters"].max() / 1e6, joined(runs["system"])
    ours = our_numbers(runs, "diffusion", parameters=parameters, systems=systems)
    return [
        Section(title, ours, figure=FIGURES[0]),
        Section(points, NOTES["sr3_table"], table, finding=sr3_finding(table)),
        Section("SR3 samples: held-out images", NOTES["sr3_samples"], figure=FIGURES[1]),
    ]
