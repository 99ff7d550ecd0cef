"""SLURM's own figures for a finished job, from `sacct`: the elapsed time the scheduler charged
and, where the site's accounting gathers it, the job's ConsumedEnergy. They exist only once the
job has ended, so the report collects them; the records keep the in-job measurements. Parsed
as SLURM 22.05 writes them (tests/slurm/sacct: captured with slurmdbd, the energy plugin on)."""

import shutil
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

# not JobName: --parsable2 does not escape a "|" in it
FIELDS = "JobID,State,Partition,QOS,NNodes,AllocTRES,Elapsed,ElapsedRaw"
FIELDS += ",ConsumedEnergyRaw,ConsumedEnergy,Start,End"
NO_VALUE = 2**63  # SLURM's "no value" markers (NO_VAL64 and kin) lie above it


def parse(text: str) -> dict[str, dict[str, Any]]:
    """Per job, its allocation's row: state, elapsed seconds and joules (None: not gathered): the
    allocation's, not its overlapping steps' sum; if blank (no extern step), its largest step's."""
    lines = text.strip().splitlines()
    header = lines[0].split("|") if lines else []
    jobs: dict[str, dict[str, Any]] = {}
    steps: dict[str, list[float]] = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split("|"), strict=True))
        job, _, step = row["JobID"].partition(".")
        raw = int(row["ConsumedEnergyRaw"] or NO_VALUE)
        joules = float(raw) if raw < NO_VALUE else None
        if step:
            steps.setdefault(job, []).append(joules or 0.0)
            continue
        jobs[job] = {"state": row["State"], "elapsed_s": int(row["ElapsedRaw"]), "energy_j": joules}
        jobs[job] |= {"nodes": int(row["NNodes"]), "qos": row["QOS"], "partition": row["Partition"]}
        jobs[job] |= {"start": row["Start"], "end": row["End"]}
    for job, found in jobs.items():
        if not found["energy_j"]:  # blank, or 0 where no energy plugin gathers it
            found["energy_j"] = max(steps.get(job, [0.0])) or None
    return jobs


def query(job_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`sacct` for these jobs; nothing where there is no sacct or no accounting (it says so)."""
    ids = sorted({job for job in job_ids if job})
    if not ids or shutil.which("sacct") is None:
        return {}
    command = ["sacct", "--parsable2", "--jobs", ",".join(ids), f"--format={FIELDS}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        return parse(done.stdout)
    except (subprocess.SubprocessError, OSError, ValueError, KeyError):  # a hung slurmdbd too
        return {}


def ran_during(job: dict[str, Any], finished_at: str) -> bool:
    """Whether a record written at `finished_at` (UTC) came from this job, as sacct's local
    Start and End say (a job id from another cluster, or reused, does not match)."""
    try:
        start, end = (datetime.fromisoformat(job[k]).astimezone(UTC) for k in ("start", "end"))
        return start <= datetime.fromisoformat(finished_at) <= end + timedelta(seconds=1)
    except (KeyError, ValueError, TypeError):  # "Unknown" (running), or no time recorded
        return False
