"""Write records.csv/parquet, the tables, the figures, index.html and report.md."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from accelstudy.files import atomic_open
from accelstudy.report import diffusion, figures, finetune
from accelstudy.report.collect import collect_records, collect_sensitivity, load_published
from accelstudy.report.tables import (
    baseline_table,
    bits_label,
    published_table1,
    table1,
    tradeoff_points,
)

STANDIN_NOTE = (
    "Rows whose data is 'stand-in' were measured on offline stand-ins built from Python's "
    "bundled documentation, not on WikiText-2/HellaSwag/BoolQ; their numbers are not "
    "comparable with the published ones, which are for TinyLlama-1.1B on the real datasets."
)
TABLE1_NOTE = (
    "A row per task and metric, and the compression ratio of the quantized Linear weights "
    "(32n / (bn + 16 n_groups)); columns: FP32, each bit list with simulated (fake) "
    "quantization, then the real recipes per bit list. BoolQ shows both tie rules of the "
    "authors' scripts: ties 'no' as on Gaudi2, ties 'yes' as on A100."
)
PUBLISHED_NOTE = (
    "Another model on other data: compare trends, not values. The Gaudi2 BoolQ scripts break "
    "ties 'no', the A100 ones 'yes'. Compression rows: the percentile split of 22 layers, the "
    "leftover layer last (7/7/8: A100 and WikiText runs) or first (8/7/7: Gaudi2 HellaSwag "
    "and BoolQ runs)."
)
TRADEOFF_NOTE = (
    "Each point is one (bit list, recipe); FP32 sits at compression 1 (dotted line: its "
    "level). The published TinyLlama-1.1B points have their own row of panels: a different "
    "model on different data, not comparable with ours."
)


@dataclass(frozen=True)
class Section:
    """One heading of the report: a note, a table, a figure (a file under figures/)."""

    title: str
    note: str = ""
    table: pd.DataFrame | None = None
    figure: str = ""


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    with atomic_open(path) as handle:
        frame.to_csv(handle, index=False)


def write_records(records: pd.DataFrame, tables: Path) -> None:
    write_csv(records, tables / "records.csv")
    tmp = tables / ".records.parquet.tmp"
    records.to_parquet(tmp, index=False)
    tmp.replace(tables / "records.parquet")


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    return table.astype(object).fillna("-")


def _markdown(section: Section) -> str:
    parts = [f"## {section.title}", section.note]
    if section.table is not None:
        parts.append(_shown(section.table).to_markdown(index=False))
    if section.figure:
        parts.append(f"![{section.title}](figures/{section.figure})")
    return "\n\n".join(p for p in parts if p)


def _html(section: Section) -> str:
    parts = [f"<h2>{html.escape(section.title)}</h2>"]
    if section.note:
        parts.append(f'<p class="note">{html.escape(section.note)}</p>')
    if section.table is not None:
        parts.append(_shown(section.table).to_html(index=False, border=0))
    if section.figure:
        src, alt = html.escape(f"figures/{section.figure}"), html.escape(section.title)
        parts.append(f'<img src="{src}" alt="{alt}" width="100%">')
    return "\n".join(parts)


def _ptq_sections(records: pd.DataFrame, ours: pd.DataFrame,
                  published: pd.DataFrame) -> list[Section]:  # fmt: skip
    """Table 1 (ours, then published), Fig. 1 and the trade-off figure, where PTQ ran."""
    if ours.empty:
        return []
    quantized = records[records["stage"] == "quantized"]
    who = f"{', '.join(quantized['model'].unique())}; {', '.join(quantized['data'].unique())}"
    return [
        Section(f"Table 1, ours ({who} data): mixed-precision PTQ", TABLE1_NOTE, ours),
        Section("Table 1, published: TinyLlama-1.1B on WikiText-2, HellaSwag, BoolQ (Gaudi2 / "
                "A100)", PUBLISHED_NOTE, published_table1(published)),
        Section("Fig. 1: pruning sensitivity, tasks side by side", figure="sensitivity.png"),
        Section("Quality against compression", TRADEOFF_NOTE, figure="tradeoff.png"),
    ]  # fmt: skip


def _finetune_sections(records: pd.DataFrame, tables: Path, folder: Path) -> list[Section]:
    """Fig. 2, the table of points and the findings where fine-tuning ran; the table and figures
    (placeholders) are written in every study, as the rule declares them."""
    runs = finetune.finetune_runs(records)
    points = finetune.finetune_points(runs)
    table = finetune.finetune_table(points)
    write_csv(table, tables / "finetune.csv")
    finetune.write_figures(runs, points, folder)
    if runs.empty:
        return []
    methods = "; ".join(m for m in runs["peak_memory_method"].dropna().unique() if m)
    return [
        Section("Fig. 2a: fine-tuning throughput and time for fixed work against cards",
                finetune.FIGURE_NOTE, figure=finetune.FIGURES[0]),
        Section("Fig. 2b: DDP vs ZeRO-3 vs FSDP for one model", figure=finetune.FIGURES[1]),
        Section("Fine-tuning points: speed-up, scaling efficiency, planned and measured memory",
                f"{finetune.TABLE_NOTE} Peak measured as: {methods or '-'}.", table),
        Section("Fine-tuning findings: the paper's beside ours", finetune.note(runs),
                finetune.findings(points)),
    ]  # fmt: skip


def _diffusion_sections(records: pd.DataFrame, tables: Path, folder: Path) -> list[Section]:
    """Fig. 3, the table of SR3 points and the image panel where SR3 ran; the table (headed,
    empty) and the figures (placeholders) are written in every study, as the rule declares."""
    runs = diffusion.diffusion_runs(records)
    table = diffusion.diffusion_table(runs)
    write_csv(table, tables / "diffusion.csv")
    diffusion.write_figures(runs, folder)
    if runs.empty:
        return []
    return [
        Section("Fig. 3: SR3 training time for fixed work against devices",
                diffusion.note(runs), figure=diffusion.FIGURES[0]),
        Section("SR3 points: speed-up, scaling efficiency, throughput and image quality",
                diffusion.TABLE_NOTE, table),
        Section("SR3 samples: held-out images", diffusion.SAMPLES_NOTE,
                figure=diffusion.FIGURES[1]),
    ]  # fmt: skip


def _ptq_figures(records: pd.DataFrame, published: pd.DataFrame, sensitivity: pd.DataFrame,
                 calibration: dict[str, int | None], folder: Path) -> None:  # fmt: skip
    """Fig. 1 and the trade-off figure, or placeholders saying why (the rule declares both)."""
    points = tradeoff_points(records, published)
    if sensitivity.empty:
        figures.placeholder(folder / "sensitivity.png", "no sensitivity tables in this study")
    else:
        figures.fig1(sensitivity, calibration, folder / "sensitivity.png")
    if points.empty:
        figures.placeholder(folder / "tradeoff.png", "no quantized records in this study")
    else:
        figures.tradeoff_figure(points, folder / "tradeoff.png")


def build_report(study: str, record_paths: Iterable[str | Path], results_dir: Path, *,
                 sensitivity: Iterable[str | Path] = (), assignments: Iterable[str | Path] = (),
                 calibration: Mapping[str, int | None] | None = None,
                 bit_lists: Sequence[Sequence[int]] = ()) -> Path:  # fmt: skip
    """Build the study report from records (and, with PTQ, the gathered sensitivity tables,
    the bit assignments, ptq.calibration_limit and ptq.bit_lists); return index.html."""
    results_dir = Path(results_dir)
    report_dir, tables = results_dir / "report", results_dir / "tables"
    records = collect_records(record_paths)
    published = load_published()
    write_records(records, tables)
    baseline = baseline_table(records, published)
    write_csv(baseline, tables / "baseline.csv")
    ours = table1(records, [bits_label(b) for b in bit_lists])
    write_csv(ours, tables / "table1.csv")
    write_csv(published_table1(published), tables / "table1_published.csv")
    figures.baseline_figure(records, report_dir / "figures" / "baseline.png")
    table = collect_sensitivity(sensitivity, assignments)
    _ptq_figures(records, published, table, dict(calibration or {}), report_dir / "figures")
    standin = STANDIN_NOTE if (records["data"] == "stand-in").any() else ""
    sections = [
        Section("Baseline (FP32) beside the published numbers", standin, baseline, "baseline.png"),
        *_ptq_sections(records, ours, published),
        *_finetune_sections(records, tables, report_dir / "figures"),
        *_diffusion_sections(records, tables, report_dir / "figures"),
    ]
    commits = ", ".join(sorted(records["git_commit"].unique()))
    return write_pages(f"accelstudy report: {study}", f"{len(records)} result records; code "
                       f"{commits}.", sections, report_dir)  # fmt: skip


def write_pages(title: str, intro: str, sections: Sequence[Section], report_dir: Path) -> Path:
    """index.html and report.md of the sections; return index.html."""
    tail = "All records: `tables/records.csv`, `tables/records.parquet`."
    markdown = "\n\n".join([f"# {title}", intro, *map(_markdown, sections), tail])
    title = html.escape(title)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}
.note{{background:#fff6d5;padding:8px}}</style></head><body>
<h1>{title}</h1>
<p>{html.escape(intro)}</p>
{"".join(map(_html, sections))}
<p>All records: <code>tables/records.csv</code>, <code>tables/records.parquet</code>.</p>
</body></html>
"""
    with atomic_open(report_dir / "report.md") as handle:
        handle.write(markdown + "\n")
    with atomic_open(report_dir / "index.html") as handle:
        handle.write(page)
    return report_dir / "index.html"
