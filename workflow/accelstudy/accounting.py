"""SLURM's own figures for a finished job, from `sacct`: the elapsed time the scheduler charged
and, where the site's accounting gathers it, the job's ConsumedEnergy. They exist only once the
job has ended, so the report collects them; the records keep the in-job measurements. Parsed
as SLURM 22.05 writes them (tests/slurm/sacct: captured with slurmdbd, the energy plugin on)."""

import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

FIELDS = "JobID,JobName,State,Partition,QOS,NNodes,AllocTRES,Elapsed,ElapsedRaw"
FIELDS += ",ConsumedEnergyRaw,ConsumedEnergy,Start,End"


def parse(text: str) -> dict[str, dict[str, Any]]:
    """Per job, its allocation's row: state, elapsed seconds and joules (None: not gathered).
    A job's energy is its allocation's, not the sum of its steps (the steps overlap); a job
    without an extern step may leave the allocation's blank: then its largest step's."""
    lines = text.strip().splitlines()
    header = lines[0].split("|") if lines else []
    jobs: dict[str, dict[str, Any]] = {}
    steps: dict[str, list[float]] = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split("|"), strict=True))
        job, _, step = row["JobID"].partition(".")
        joules = float(row["ConsumedEnergyRaw"]) if row["ConsumedEnergyRaw"] else None
        if step:
            steps.setdefault(job, []).append(joules or 0.0)
            continue
        jobs[job] = {"state": row["State"], "elapsed_s": int(row["ElapsedRaw"]), "energy_j": joules}
        jobs[job] |= {"nodes": int(row["NNodes"]), "qos": row["QOS"], "partition": row["Partition"]}
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
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    return parse(done.stdout) if done.returncode == 0 else {}
