"""Write records.csv/parquet, the tables, the figures, index.html and report.md."""

from __future__ import annotations

import html
import shutil
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from accelstudy.records import atomic_open
from accelstudy.report.collect import collect_records, load_published
from accelstudy.report.figures import baseline_figure
from accelstudy.report.tables import baseline_table, table1

STANDIN_NOTE = (
    "Rows whose data is 'stand-in' were measured on offline stand-ins built from Python's "
    "bundled documentation, not on WikiText-2/HellaSwag/BoolQ; their numbers are not "
    "comparable with the published ones, which are for TinyLlama-1.1B on the real datasets."
)


def _write_tables(records: pd.DataFrame, tables: Path) -> None:
    tables.mkdir(parents=True, exist_ok=True)
    with atomic_open(tables / "records.csv") as handle:
        records.to_csv(handle, index=False)
    tmp = tables / ".records.parquet.tmp"
    records.to_parquet(tmp, index=False)
    tmp.replace(tables / "records.parquet")


def _copy_figures(figures: Iterable[str | Path], results_dir: Path, target: Path) -> list[str]:
    """Copy figures into the report folder, named after their path under results/{study}."""
    names = []
    for figure in figures:
        figure = Path(figure)
        try:
            relative = figure.resolve().relative_to(results_dir.resolve())
        except ValueError:
            relative = Path(figure.name)
        name = "-".join(relative.with_suffix("").parts) + figure.suffix
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(figure, target / name)
        names.append(name)
    return names


def build_report(
    study: str,
    record_paths: Iterable[str | Path],
    results_dir: Path,
    figures: Iterable[str | Path] = (),
) -> Path:
    """Build the study report from records; return the path of index.html."""
    results_dir = Path(results_dir)
    records = collect_records(record_paths)
    _write_tables(records, results_dir / "tables")
    published = load_published()
    baseline = baseline_table(records, published)
    report_dir = results_dir / "report"
    figure = baseline_figure(records, report_dir / "figures" / "baseline.png")
    with atomic_open(results_dir / "tables" / "baseline.csv") as handle:
        baseline.to_csv(handle, index=False)
    ptq = table1(records, published)
    with atomic_open(results_dir / "tables" / "table1.csv") as handle:
        ptq.to_csv(handle, index=False)
    fig1 = _copy_figures(figures, results_dir, report_dir / "figures")
    ptq_md = (
        [
            "## Table 1: mixed-precision PTQ beside the published numbers",
            "",
            ptq.to_markdown(index=False),
            "",
        ]
        + [f"![sensitivity](figures/{name})" for name in fig1]
        if len(ptq)
        else []
    )
    ptq_html = (
        "<h2>Table 1: mixed-precision PTQ beside the published numbers</h2>"
        + ptq.to_html(index=False, border=0)
        + "".join(f'<img src="figures/{html.escape(n)}" alt="Fig. 1" width="100%">' for n in fig1)
        if len(ptq)
        else ""
    )
    has_standin = (records["data"] == "stand-in").any()
    note = STANDIN_NOTE if has_standin else ""
    commits = ", ".join(sorted(records["git_commit"].unique()))

    markdown = "\n".join(
        [
            f"# accelstudy report: {study}",
            "",
            f"{len(records)} result records; code {commits}.",
            "",
            "## Baseline (FP32) beside the published numbers",
            "",
            note,
            "",
            baseline.to_markdown(index=False),
            "",
            f"![baseline](figures/{figure.name})",
            "",
            *ptq_md,
        ]
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>accelstudy report: {html.escape(study)}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}
.note{{background:#fff6d5;padding:8px}}</style></head><body>
<h1>accelstudy report: {html.escape(study)}</h1>
<p>{len(records)} result records; code {html.escape(commits)}.</p>
<h2>Baseline (FP32) beside the published numbers</h2>
{f'<p class="note">{html.escape(note)}</p>' if note else ""}
{baseline.to_html(index=False, border=0)}
<img src="figures/{figure.name}" alt="baseline accuracy and throughput" width="100%">
{ptq_html}
<p>All records: <code>tables/records.csv</code>, <code>tables/records.parquet</code>.</p>
</body></html>
"""
    with atomic_open(report_dir / "report.md") as handle:
        handle.write(markdown)
    with atomic_open(report_dir / "index.html") as handle:
        handle.write(page)
    return report_dir / "index.html"
