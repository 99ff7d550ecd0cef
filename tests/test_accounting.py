"""sacct's elapsed time and energy, parsed from real `sacct --parsable2` output: SLURM 22.05.8
with slurmdbd (MariaDB 10.11) and the pm_counters energy plugin reading a counter we drove at
150 W (node n1) and 230 W (n2); tests/slurm/sacct/HOW.md says how it was captured."""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path

import pandas as pd
from accelstudy.accounting import FIELDS, parse, query
from accelstudy.report.collect import with_scheduler_figures

CAPTURED = Path(__file__).parent / "slurm" / "sacct"


def captured(name: str) -> str:
    return (CAPTURED / name).read_text()


def test_the_captured_version_is_stated():
    assert captured("VERSION").strip() == "slurm-wlm 22.05.8"
    # captured with JobName too (the parser reads by the header; FIELDS leaves it out)
    assert set(FIELDS.split(",")) < set(captured("one_gpu.txt").splitlines()[0].split("|"))


def test_a_job_is_its_allocation_row_not_the_sum_of_its_steps():
    one = parse(captured("one_gpu.txt"))["1"]
    assert one == {"state": "COMPLETED", "elapsed_s": 5, "energy_j": 750.0, "nodes": 1,
                   "qos": "normal", "partition": "gpu", "start": "2026-12-01T06:03:00",
                   "end": "2026-12-01T06:03:05"}  # fmt: skip  # 5 s x 150 W
    two = parse(captured("two_nodes.txt"))["2"]  # 4 s x (150 + 230) W; ConsumedEnergy "1.52K"
    assert two["energy_j"] == 1520.0 and two["nodes"] == 2 and two["elapsed_s"] == 4
    extern = parse(captured("with_extern/two_nodes.txt"))["5"]  # steps 600 + 1520 + 1520
    assert extern["energy_j"] == 1520.0


def test_a_blank_allocation_energy_takes_its_step():
    """Without an extern step a failed batch job's allocation row leaves the energy blank."""
    failed = parse(captured("failed.txt"))["3"]
    assert failed["state"] == "FAILED" and failed["elapsed_s"] == 2
    assert failed["energy_j"] == 300.0  # its batch step: 2 s x 150 W
    assert parse(captured("with_extern/failed.txt"))["6"]["energy_j"] == 300.0


def test_no_energy_plugin_or_no_value_is_none_not_zero():
    header, row = captured("one_gpu.txt").splitlines()[:2]
    fields = dict(zip(header.split("|"), row.split("|"), strict=True))
    for raw in ("0", str(2**64 - 2)):  # no plugin; SLURM's NO_VAL64
        text = "|".join((fields | {"ConsumedEnergyRaw": raw}).values())
        assert parse(f"{header}\n{text}\n")["1"]["energy_j"] is None


def test_query_asks_sacct_for_the_jobs_and_nothing_without_it(tmp_path, monkeypatch):
    """sacct stands in at the command boundary: it records its arguments, prints the capture."""
    fake = tmp_path / "sacct"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat {CAPTURED}/two_nodes.txt\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert query(["2", "", "2"])["2"]["elapsed_s"] == 4
    assert (tmp_path / "args").read_text().split() == [
        "--parsable2", "--jobs", "2", f"--format={FIELDS}"]  # fmt: skip
    fake.write_text("#!/bin/sh\necho 'sacct: error: accounting storage is disabled' >&2\nexit 1\n")
    assert query(["2"]) == {}
    fake.write_text("#!/bin/sh\necho 'JobID|State'\necho '2|COMPLETED|extra|field'\n")
    assert query(["2"]) == {}  # a row that does not parse: nothing, never a broken report
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert query(["2"]) == {}


def test_the_charge_follows_the_elapsed_time_the_scheduler_saw():
    """A job's own clock said 1 h (2 node-hours at 2 nodes); sacct's elapsed 5400 s: 3 units.
    A group job's two records share its time: left on their own clocks. Job 9's record was
    written after sacct's job 9 had ended (another cluster's, or a reused id): not matched."""
    job = parse(captured("two_nodes.txt"))["2"]  # ran 06:03:06-06:03:10, sacct's local time
    during = (dt.datetime.fromisoformat("2026-12-01T06:03:09").astimezone(dt.UTC)).isoformat()
    later = (dt.datetime.fromisoformat("2026-12-01T07:00:00").astimezone(dt.UTC)).isoformat()
    records = pd.DataFrame({
        "slurm_job": ["2", "7", "7", "", "9"], "cost_units": [2.0, 1.0, 1.0, 0.5, 1.0],
        "cost_hours": [1.0, 1.0, 1.0, 0.5, 1.0], "finished_at": [during] * 4 + [later],
    })  # fmt: skip
    accounted = {"2": job | {"elapsed_s": 5400}, "7": job | {"elapsed_s": 60}, "9": job}
    shown = with_scheduler_figures(records, accounted)
    assert shown["cost_units"].tolist() == [3.0, 1.0, 1.0, 0.5, 1.0]
    assert shown["cost_hours"].tolist() == [1.5, 1.0, 1.0, 0.5, 1.0]
    assert shown["sacct_energy_j"].iloc[0] == 1520.0
    assert shown["sacct_elapsed_s"].iloc[0] == 5400
    assert shown[["sacct_energy_j", "sacct_elapsed_s"]].iloc[1:].isna().all().all()
