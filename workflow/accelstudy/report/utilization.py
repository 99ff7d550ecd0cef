"""How close each job came to the machine's limit: model FLOP/s (accelstudy.flops) over its
measured window against the peak of what it held (accelstudy.peak), per job and per stage."""

from pathlib import Path

import pandas as pd

from accelstudy.report.outputs import output
from accelstudy.report.pages import NOTES, Section, write_csv

JOB = ["stage", "system", "model", "task", "method", "protocol", "strategy", "attention", "cards"]
JOB += ["devices", "compute_dtype"]
TFLOPS_COLUMNS = {"achieved_tflops": "achieved TFLOP/s", "peak_tflops": "peak TFLOP/s"}
TFLOPS_COLUMNS |= {"mfu": "MFU", "peak_source": "peak source"}


def per_job(records: pd.DataFrame) -> pd.DataFrame:
    """A row per record that ran: what it was, achieved and peak TFLOP/s, MFU, the peak's source."""
    ran = records[records["stage"] != "sensitivity"].dropna(subset=["achieved_tflops"])
    columns = [c for c in JOB if c in ran and ran[c].notna().any()]
    return ran[[*columns, *TFLOPS_COLUMNS]].rename(columns=TFLOPS_COLUMNS).reset_index(drop=True)


def per_stage(records: pd.DataFrame) -> pd.DataFrame:
    """Per stage and system: jobs, the median and range of MFU, achieved TFLOP/s, the sources."""
    jobs = per_job(records)
    if jobs.empty:
        return jobs
    stages = jobs.groupby(["stage", "system", "compute_dtype"], sort=False)
    mfu = stages["MFU"].agg(jobs="size", mfu_median="median", mfu_min="min", mfu_max="max")
    achieved = stages["achieved TFLOP/s"].median().rename("achieved_tflops")
    sources = stages["peak source"].agg(lambda s: "; ".join(dict.fromkeys(s))).rename("source")
    return mfu.join([achieved, sources]).reset_index()


def sections(records: pd.DataFrame, results_dir: Path) -> list[Section]:
    """Fraction of peak per stage and per job (the `utilization` table, in every study)."""
    jobs = per_job(records)
    write_csv(jobs, output(results_dir, "utilization"))
    if jobs.empty:
        return []
    return [
        Section("Fraction of peak (MFU), per stage", NOTES["utilization"], per_stage(records)),
        Section("Fraction of peak (MFU), per job", "", jobs),
    ]
