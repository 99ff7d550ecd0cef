"""Write records.csv/parquet, the tables, the figures, index.html and report.md."""

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from accelstudy import accounting
from accelstudy.files import atomic_open
from accelstudy.points import bits_label
from accelstudy.report import diffusion, figures, finetune, recommend, tables, timing, utilization
from accelstudy.report.tables import NOTES

PUBLISHED = "Table 1, published: TinyLlama-1.1B on WikiText-2, HellaSwag, BoolQ (Gaudi2 / A100)"
FIG2A = "Fig. 2a: fine-tuning throughput and time for fixed work against cards"
POINTS = "Fine-tuning points: speed-up, scaling efficiency, planned and measured memory"
FINDINGS = "Fine-tuning findings: the paper's beside ours"
FIG3 = "Fig. 3: SR3 training time for fixed work against devices"
SR3_POINTS = "SR3 points: speed-up, scaling efficiency, throughput and image quality"
RECORDS = "All records: `tables/records.csv`, `tables/records.parquet`."
STYLE = """body{font-family:sans-serif;max-width:1200px;margin:2em auto}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px}
.note{background:#fff6d5;padding:8px}"""


@dataclass(frozen=True)
class Section:
    """One heading of the report: a note, a table, a figure (a file under figures/)."""

    title: str
    note: str = ""
    table: pd.DataFrame | None = None
    figure: str = ""

    def shown(self) -> pd.DataFrame:
        """Blanks as "-", no columns name (to_html would show one as an empty first column)."""
        return self.table.astype(object).fillna("-").rename_axis(columns=None)

    def to_markdown(self) -> str:
        table = "" if self.table is None else self.shown().to_markdown(index=False)
        image = self.figure and f"![{self.title}](figures/{self.figure})"
        return "\n\n".join(p for p in [f"## {self.title}", self.note, table, image] if p)

    def to_html(self) -> str:
        note = self.note and f'<p class="note">{html.escape(self.note)}</p>'
        table = "" if self.table is None else self.shown().to_html(index=False, border=0)
        src, alt = html.escape(f"figures/{self.figure}"), html.escape(self.title)
        image = self.figure and f'<img src="{src}" alt="{alt}" width="100%">'
        return "\n".join(p for p in [f"<h2>{alt}</h2>", note, table, image] if p)


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    with atomic_open(path) as handle:
        frame.to_csv(handle, index=False)


def write_records(records: pd.DataFrame, folder: Path) -> None:
    write_csv(records, folder / "records.csv")
    with atomic_open(folder / "records.parquet", "wb") as handle:
        records.to_parquet(handle, index=False)


def write_pages(title: str, intro: str, sections: Sequence[Section], report_dir: Path) -> Path:
    """index.html and report.md of the sections; return index.html."""
    markdown = "\n\n".join([f"# {title}", intro, *(s.to_markdown() for s in sections), RECORDS])
    title = html.escape(title)
    body = "".join(s.to_html() for s in sections)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>{STYLE}</style></head><body>
<h1>{title}</h1>
<p>{html.escape(intro)}</p>
{body}
<p>All records: <code>tables/records.csv</code>, <code>tables/records.parquet</code>.</p>
</body></html>
"""
    for name, text in (("report.md", markdown + "\n"), ("index.html", page)):
        with atomic_open(report_dir / name) as handle:
            handle.write(text)
    return report_dir / "index.html"


def _finetune(records: pd.DataFrame, folder: Path) -> list[Section]:
    """Fig. 2, the points and the findings; the table and figures are written in every study."""
    runs = finetune.finetune_runs(records)
    points = finetune.finetune_points(runs)
    table = finetune.finetune_table(points)
    write_csv(table, folder / "tables" / "finetune.csv")
    finetune.write_figures(runs, points, folder / "report" / "figures")
    if runs.empty:
        return []
    methods = "; ".join(m for m in runs["peak_memory_method"].dropna().unique() if m)
    return [
        Section(FIG2A, NOTES["finetune_figure"], figure=finetune.FIGURES[0]),
        Section("Fig. 2b: DDP vs ZeRO-3 vs FSDP for one model", figure=finetune.FIGURES[1]),
        Section(POINTS, f"{NOTES['finetune_table']} Peak measured as: {methods or '-'}.", table),
        Section(FINDINGS, finetune.note(runs), finetune.findings(points)),
    ]


def _diffusion(records: pd.DataFrame, folder: Path) -> list[Section]:
    """Fig. 3, the SR3 points and the samples; the table and figures are written in every study."""
    runs = diffusion.diffusion_runs(records)
    table = diffusion.diffusion_table(runs)
    write_csv(table, folder / "tables" / "diffusion.csv")
    diffusion.write_figures(runs, folder / "report" / "figures")
    if runs.empty:
        return []
    scaling, samples = diffusion.FIGURES
    return [
        Section(FIG3, diffusion.note(runs), figure=scaling),
        Section(SR3_POINTS, NOTES["sr3_table"], table),
        Section("SR3 samples: held-out images", NOTES["sr3_samples"], figure=samples),
    ]


def _utilization(records: pd.DataFrame, out: Path) -> list[Section]:
    """Fraction of peak per stage and per job (tables/utilization.csv)."""
    jobs = utilization.per_job(records)
    write_csv(jobs, out / "utilization.csv")
    if jobs.empty:
        return []
    stages = utilization.per_stage(records)
    return [
        Section("Fraction of peak (MFU), per stage", NOTES["utilization"], stages),
        Section("Fraction of peak (MFU), per job", "", jobs),
    ]


def _timing(record_paths: Sequence[str | Path], results_dir: Path) -> list[Section]:
    """Where the time went, per rule and per job (tables/time_rules.csv, time_jobs.csv), in a
    study Snakemake ran (its jobs' benchmark files are there)."""
    if not (results_dir / "benchmarks").is_dir():
        return []
    rules, jobs = timing.time_tables(record_paths, results_dir)
    write_csv(rules, results_dir / "tables" / "time_rules.csv")
    write_csv(jobs, results_dir / "tables" / "time_jobs.csv")
    return [
        Section("Where the time went, per rule", NOTES["timing"], rules),
        Section("Where the time went, per job", "", jobs),
    ]


def _where(records: pd.DataFrame) -> list[Section]:
    """What to run where, from the study's fine-tuning measurements (`accelstudy recommend`
    adds the planner's map for any system and model)."""
    titles = {
        "agreement": ("Strategies train the same model: each one's losses beside DDP's", "same"),
        "choices": ("What to run where: the fastest, cheapest and least-energy point", "where"),
        "rule": ("Shard only when the model does not fit: the paper's rule, checked", "rule"),
    }
    return [
        Section(titles[name][0], NOTES[titles[name][1]], table)
        for name, table in recommend.sections(records)
    ]


def build_report(
    study: str,
    record_paths: Iterable[str | Path],
    results_dir: Path,
    *,
    sensitivity: Iterable[str | Path] = (),
    assignments: Iterable[str | Path] = (),
    calibration: Mapping[str, int | None] | None = None,
    bit_lists: Sequence[Sequence[int]] = (),
) -> Path:
    """The study report from records (with PTQ: sensitivity, assignments, ptq settings)."""
    results_dir = Path(results_dir)
    out, figure = results_dir / "tables", results_dir / "report" / "figures"
    record_paths = list(record_paths)
    records = tables.collect_records(record_paths)  # sacct's figures: this site's own jobs
    records = tables.with_scheduler_figures(records, accounting.query(records["slurm_job"]))
    published = tables.load_published()
    write_records(records, out)
    baseline = tables.baseline_table(records, published)
    ours = tables.table1(records, [bits_label(b) for b in bit_lists])
    theirs = tables.published_table1(published)
    for table, name in [(baseline, "baseline"), (ours, "table1"), (theirs, "table1_published")]:
        write_csv(table, out / f"{name}.csv")
    figures.save(figures.baseline_figure(records), figure / "baseline.png")
    sensitive = tables.collect_sensitivity(sensitivity, assignments)
    why_not = "no sensitivity tables in this study"
    figures.draw(figure / "sensitivity.png", why_not, figures.fig1, sensitive, calibration or {})
    points = tables.tradeoff_points(records, published)
    why_not = "no quantized records in this study"
    figures.draw(figure / "tradeoff.png", why_not, figures.tradeoff_figure, points)
    quantized = records[records["stage"] == "quantized"]
    who = f"{tables.joined(quantized['model'])}; {tables.joined(quantized['data'])}"
    ptq = [  # Table 1 (ours, then published), Fig. 1 and the trade-off figure, where PTQ ran
        Section(f"Table 1, ours ({who} data): mixed-precision PTQ", NOTES["table1"], ours),
        Section(PUBLISHED, NOTES["published"], theirs),
        Section("Fig. 1: pruning sensitivity, tasks side by side", figure="sensitivity.png"),
        Section("Quality against compression", NOTES["tradeoff"], figure="tradeoff.png"),
    ]
    standin = NOTES["standin"] if (records["data"] == "stand-in").any() else ""
    sections = [
        Section("Baseline (FP32) beside the published numbers", standin, baseline, "baseline.png"),
        *([] if ours.empty else ptq),
        *_finetune(records, results_dir),
        *_diffusion(records, results_dir),
        *_where(records),
        *_utilization(records, out),
        *_timing(record_paths, results_dir),
    ]
    commits = ", ".join(sorted(records["git_commit"].unique()))
    intro = f"{len(records)} result records; code {commits}."
    return write_pages(f"accelstudy report: {study}", intro, sections, results_dir / "report")
