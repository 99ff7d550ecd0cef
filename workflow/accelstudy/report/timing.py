"""Where a study's time went: Snakemake's benchmark file of every job (wall, CPU time, peak RSS)
beside each record's timeline (the start-up before its measured work, then the rest)."""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from accelstudy.files import read_json
from accelstudy.layout import STAGE_RULE, job_of
from accelstudy.report.figures import draw
from accelstudy.report.outputs import figure, output
from accelstudy.report.pages import NOTES, Section, write_csv
from accelstudy.timeline import STARTUP

PHASES = [f"{phase}_s" for phase in STARTUP]  # imports, plan, launcher, device, model, data
TIMED = ["rule", "job", "startup_s", *PHASES, "warmup_s", "measured_s"]
JOB = ["rule", "job", "wall_s", "cpu_s", "max_rss_mib", *TIMED[2:]]
JOBS = pd.DataFrame(columns=JOB)  # the tables of a study without benchmark files: no rows
RULES = pd.DataFrame(columns=["rule", "jobs", *JOB[2:], "wall_share", "startup_share"])


def benchmarks(*roots: Path) -> pd.DataFrame:
    """A row per <root>/benchmarks/<rule>[/<job>].tsv (the study's shared rules, the system's
    measuring rules): the job's last run (Snakemake appends repeats)."""
    rows, folders = [], [root / "benchmarks" for root in roots]
    for path, folder in sorted((p, f) for f in folders for p in f.rglob("*.tsv")):
        rule, *job = path.relative_to(folder).with_suffix("").parts
        last = pd.read_csv(path, sep="\t").iloc[-1]
        numbers = pd.to_numeric(last[["s", "cpu_time", "max_rss"]], errors="coerce")
        rows.append([rule, "/".join(job) or "-", *numbers])
    return pd.DataFrame(rows, columns=["rule", "job", "wall_s", "cpu_s", "max_rss_mib"])


def timelines(record_paths: Iterable[str | Path], measured: Path) -> pd.DataFrame:
    """A row per job: seconds from its process start to its first measured step (start-up:
    interpreter, imports, model and data, warm-up), the phases of it the job named (a launched
    point's: its own and its rank 0's, one after the other), its warm-up steps (from its model
    and data ready to its first measured step), and from there to its record; a
    job writing several records (layout.COVERS), each record's (from the one before) summed."""
    rows = []
    for path in map(Path, record_paths):
        record = read_json(path)
        times = record["provenance"].get("timeline", {})
        if "end_s" not in times:
            continue  # a point that did not run, or a record from before timelines
        startup = times.get("measured_s", times.get("ready_s", times["end_s"]))
        warmup = startup - times.get("ready_s", startup)  # its warm-up steps (a sweep point's)
        rule = STAGE_RULE.get(record["stage"], record["stage"])
        try:  # named as its benchmark is (accelstudy.layout)
            job = job_of(rule, path.resolve().relative_to(measured.resolve()))
        except ValueError:  # a record from elsewhere: named by its path
            job = str(path.with_suffix(""))
        spent = pd.DataFrame([times.get("phases", {}), times.get("rank_phases", {})])
        phases = spent.reindex(columns=PHASES).sum(min_count=1)  # a phase neither timed: blank
        rows.append([rule, job, startup, *phases, warmup, times["end_s"] - startup])
    table = pd.DataFrame(rows, columns=TIMED)
    return table.groupby(["rule", "job"], as_index=False).sum(min_count=1)[TIMED]


def time_tables(
    record_paths: Iterable[str | Path], results_dir: Path, measured: Path
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per rule, per job): each job's benchmark beside its record's start-up and measured work;
    per rule the sums, each rule's share of all jobs' wall time and its start-up share."""
    timed = timelines(record_paths, measured)
    jobs = benchmarks(results_dir, measured).merge(timed, on=["rule", "job"], how="outer")[JOB]
    jobs = jobs.astype({column: float for column in JOB[2:]})
    # per rule: the peak RSS, the other figures' sums (blank where no job has the figure)
    how = {c: (c, "max" if c == "max_rss_mib" else lambda s: s.sum(min_count=1)) for c in JOB[2:]}
    rules = jobs.groupby("rule", as_index=False).agg(jobs=("job", "size"), **how)
    rules["wall_share"] = (rules["wall_s"] / rules["wall_s"].sum()).map(_percent)
    startup = rules["startup_s"] / (rules["startup_s"] + rules["measured_s"])
    rules["startup_share"] = startup.map(_percent)
    rules = rules.sort_values("wall_s", ascending=False, ignore_index=True)
    return rules.round(1), jobs.sort_values(["rule", "job"], ignore_index=True).round(1)


def time_figure(rules: pd.DataFrame) -> plt.Figure:
    """Each rule's summed job time as a stacked bar: its start-up phases, its warm-up steps, the
    start-up no phase names (such as the Trainer's set-up), its measured work, the rest of the
    job; a rule whose jobs write no record, its whole wall time."""
    parts = {f"{phase}": rules[f"{phase}_s"] for phase in STARTUP}
    named = rules[PHASES].sum(axis=1, min_count=1)
    parts["warm-up steps"] = rules["warmup_s"]
    parts["other start-up"] = rules["startup_s"] - named - rules["warmup_s"].fillna(0)
    parts["measured work"] = rules["measured_s"]
    timed = rules[["startup_s", "measured_s"]].sum(axis=1, min_count=1)
    parts["rest of the job"] = (rules["wall_s"] - timed).where(timed.notna(), rules["wall_s"])
    shown = pd.DataFrame(parts).fillna(0).clip(lower=0).set_index(rules["rule"]).iloc[::-1]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(shown) + 1.5))
    colours: list[Any] = ["tab:blue", "tab:cyan", "tab:pink", "tab:orange", "tab:green"]
    colours += ["tab:red", "tab:olive", "tab:purple", "tab:brown", "0.8"]
    shown.plot.barh(stacked=True, width=0.7, ax=ax, color=colours)
    ax.set(xlabel="seconds, summed over the rule's jobs", ylabel="")
    ax.legend(fontsize=8, ncol=4, loc="lower right")
    fig.tight_layout()
    return fig


def startup_finding(rules: pd.DataFrame) -> str:
    """The summary's line: how much of the study's summed job time, and of each measuring
    rule's, went before its measured work."""
    timed = rules[rules["startup_share"] != "-"]
    said = [f"{r['startup_share']} of {r['rule']}'s" for _, r in timed.iterrows()]
    whole = _percent(rules["startup_s"].sum() / rules["wall_s"].sum())
    return (f"Start-up (its phases and warm-up): {whole} of all jobs' time; "
            f"{', '.join(said)}." if said else "")  # fmt: skip


def _percent(share: float) -> str:
    return "-" if pd.isna(share) or share == 0 else f"{share:.0%}"


def sections(
    record_paths: Iterable[str | Path], results_dir: Path, measured: Path
) -> list[Section]:
    """Where the time went, per rule and per job (the `time_rules` and `time_jobs` tables), in a
    study Snakemake ran (its jobs' benchmark files are there; elsewhere the tables are empty)."""
    ran = (results_dir / "benchmarks").is_dir()
    rules, jobs = time_tables(record_paths, results_dir, measured) if ran else (RULES, JOBS)
    write_csv(rules, output(results_dir, "time_rules"))
    write_csv(jobs, output(results_dir, "time_jobs"))
    draw(output(results_dir, "time_figure"), "no benchmark files", time_figure, rules)
    if not ran:
        return []
    finding = startup_finding(rules)
    return [
        Section(
            "Where the time went, per rule", NOTES["timing"], rules, figure("time_figure"), finding
        ),
        Section("Where the time went, per job", "", jobs),
    ]
