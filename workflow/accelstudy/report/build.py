"""The study report: each part's sections (its tables and figures written beside them), then
what to run where, the fraction of peak and where the time went, as index.html and report.md."""

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from accelstudy import accounting
from accelstudy.report import (
    estimates,
    finetuning,
    quantization,
    recommend,
    superresolution,
    timing,
    utilization,
)
from accelstudy.report.collect import collect_records, with_scheduler_figures
from accelstudy.report.pages import NOTES, Section, not_shown, write_pages, write_records


def build_report(
    study: str,
    record_paths: Iterable[str | Path],
    results_dir: Path,
    *,
    system: str | None = None,
    sensitivity: Iterable[str | Path] = (),
    assignments: Iterable[str | Path] = (),
    calibration: Mapping[str, int | None] | None = None,
    bit_lists: Sequence[Sequence[int]] = (),
) -> Path:
    """The study report from records (with PTQ: sensitivity, assignments, ptq settings): its
    sections from `system`'s records (default: all), every system's records in its tables."""
    results_dir, record_paths = Path(results_dir), list(record_paths)
    every = collect_records(record_paths)  # sacct's figures: this site's own jobs
    every = with_scheduler_figures(every, accounting.query(every["slurm_job"]))
    write_records(every, results_dir, results_dir)
    records = every[every["system"] == system] if system else every
    by_system = every.pivot_table("record", "system", "stage", "size", fill_value=0).reset_index()
    measured = results_dir / system if system else results_dir
    sections = [
        *quantization.sections(
            records, results_dir, sensitivity, assignments, calibration, bit_lists
        ),
        *finetuning.sections(records, results_dir),
        *superresolution.sections(records, results_dir),
        *recommend.sections(records),
        *utilization.sections(records, results_dir),
        *timing.sections(records["record"], results_dir, measured),
        *estimates.sections(records, results_dir),
        *not_shown(records, results_dir),
    ]
    if len(by_system) > 1:  # the study holds other systems' records too
        note = NOTES["systems"].format(system=system)
        sections.append(Section("Records by system", note, by_system))
    commits = ", ".join(sorted(records["git_commit"].unique()))
    intro = f"{len(records)} result records; code {commits}."
    return write_pages(f"accelstudy report: {study}", intro, sections, results_dir)
