"""The study report: each part's sections (its tables and figures written beside them), then
what to run where, the fraction of peak and where the time went, as index.html and report.md."""

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from accelstudy import accounting
from accelstudy.report import diffusion, finetune, ptq, recommend, timing, utilization
from accelstudy.report.collect import collect_records, with_scheduler_figures
from accelstudy.report.pages import write_pages, write_records


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
    results_dir, record_paths = Path(results_dir), list(record_paths)
    records = collect_records(record_paths)  # sacct's figures: this site's own jobs
    records = with_scheduler_figures(records, accounting.query(records["slurm_job"]))
    write_records(records, results_dir / "tables")
    sections = [
        *ptq.sections(records, results_dir, sensitivity, assignments, calibration, bit_lists),
        *finetune.sections(records, results_dir),
        *diffusion.sections(records, results_dir),
        *recommend.sections(records),
        *utilization.sections(records, results_dir / "tables"),
        *timing.sections(record_paths, results_dir),
    ]
    commits = ", ".join(sorted(records["git_commit"].unique()))
    intro = f"{len(records)} result records; code {commits}."
    return write_pages(f"accelstudy report: {study}", intro, sections, results_dir / "report")
