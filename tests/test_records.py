"""Records: schema-checked, provenance filled, written atomically."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
import torch
from accelstudy.files import atomic_open
from accelstudy.records import provenance, read_record, write_record


def record(**changes) -> dict:
    base = {
        "stage": "baseline", "study": "t", "system": "cpu", "device": "cpu", "model": "m",
        "task": "boolq", "method": "fp32", "protocol": "paper", "data_source": "standin",
        "inputs": {"data": {"source": "standin", "prepared": "sha256:0"}},
        "parameters": {"limit": 3},
        "metrics": {"accuracy": 0.5, "wall_time_s": 1.0, "tokens_per_s": 10.0, "peak_memory_bytes": 1},
        "provenance": provenance("abc", "cpu", "cpu", 1.25),
    }  # fmt: skip
    base.update(changes)
    return base


def test_provenance_has_commit_versions_hardware():
    prov = provenance("abc", "some cpu", "cpu", 1.25)
    assert prov["config_hash"] == "abc" and prov["wall_time_s"] == 1.25
    assert {"torch", "transformers", "accelstudy"} <= set(prov["versions"])
    assert prov["hardware"]["cpu_count"] >= 1
    # the dispatch torch chose, which ATEN_CPU_CAPABILITY (the reference machine's AVX2 hold) caps
    held = os.environ.get("ATEN_CPU_CAPABILITY", "").upper()
    assert prov["hardware"]["cpu_dispatch"] == (held or torch.backends.cpu.get_cpu_capability())
    assert prov["git_commit"]


def test_write_and_read_record(tmp_path):
    write_record(tmp_path / "r.json", record())
    assert read_record(tmp_path / "r.json")["metrics"]["accuracy"] == 0.5


def test_invalid_record_is_not_written(tmp_path):
    bad = record(metrics={"accuracy": 0.5})
    with pytest.raises(jsonschema.ValidationError):
        write_record(tmp_path / "r.json", bad)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("stage", "metrics", "valid"),
    [
        ("baseline", {"tokens_per_s": 0.0}, False),  # ran, nothing timed
        ("diffusion", {"images_per_s": 0.0, "status": "ok"}, False),
        ("diffusion", {"images_per_s": -2.5, "status": "ok"}, False),
        ("diffusion", {"images_per_s": 0.1, "status": "ok"}, True),
        ("finetune", {"status": "unsupported"}, True),  # did not run: no rate at all
    ],
)
def test_a_measurement_that_ran_has_a_rate_above_zero(stage, metrics, valid, tmp_path):
    ran = record(stage=stage, metrics={"wall_time_s": 1.0, "peak_memory_bytes": 1, **metrics})
    if valid:
        write_record(tmp_path / "r.json", ran)
    else:
        with pytest.raises(jsonschema.ValidationError, match="less than or equal to the minimum"):
            write_record(tmp_path / "r.json", ran)


def test_failure_mid_write_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "out.json"
    target.write_text('{"old": true}')
    with pytest.raises(RuntimeError), atomic_open(target) as handle:
        handle.write('{"new": ')
        raise RuntimeError("killed")
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_scheduler_context():
    from accelstudy.records import scheduler_context

    assert scheduler_context({}) == {"kind": "local"}
    slurm = {"SLURM_JOB_ID": "42", "SLURM_JOB_PARTITION": "gpu", "SLURMD_NODENAME": "nid001",
             "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_GPUS": "2,3"}  # fmt: skip
    assert scheduler_context(slurm) == {"kind": "slurm", "job_id": "42", "partition": "gpu",
                                        "node": "nid001", "gpus": "0,1", "job_gpus": "2,3"}  # fmt: skip
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "accelstudy-study"}
    assert scheduler_context(pod) == {"kind": "kubernetes", "pod": "accelstudy-study"}


@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o002, 0o644, 0o755),
                                                              (0o000, 0o644, 0o755),
                                                              (0o077, 0o600, 0o700)])  # fmt: skip
def test_atomic_writes_take_the_umask_modes(umask, file_mode, dir_mode, tiny, tmp_path):
    """Shared project directories: what open()/mkdir() would give, not mkstemp's 0600, but
    never writable by the group or others, whatever the umask."""
    import os

    from accelstudy.models import save_prepared

    old = os.umask(umask)
    try:
        write_record(tmp_path / "r.json", record())
        save_prepared(*tiny, tmp_path / "model")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == file_mode
    assert (tmp_path / "model").stat().st_mode & 0o777 == dir_mode
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "model").iterdir()} == {file_mode}


def test_a_block_that_fails_after_the_measurement_is_marked_not_the_record_lost(
    tmp_path, monkeypatch
):
    """A charge rule dividing by zero and a failing hardware probe, after the job measured:
    the record is written with its metrics, and those two blocks say `error` and why."""
    from accelstudy import records

    def divide_by_zero(*_):
        return 1 / 0

    def no_hardware(*_):
        raise RuntimeError("the probe failed")

    monkeypatch.setattr(records, "charged", divide_by_zero)
    monkeypatch.setattr(records, "provenance", no_hardware)
    job = records.Job.from_flags(
        study="t", system="cpu", out=tmp_path / "r.json", device_kind="cpu"
    )
    metrics = {"accuracy": 0.5, "wall_time_s": 1.0, "tokens_per_s": 10.0, "peak_memory_bytes": 1}
    inputs = {"data": {"source": "standin"}}
    job.write(records.Record(stage="baseline", model="m", task="boolq", method="fp32",
                             data_source="standin", inputs=inputs, parameters={"limit": 3},
                             metrics=metrics, protocol="paper"))  # fmt: skip
    written = read_record(tmp_path / "r.json")
    assert written["metrics"]["accuracy"] == 0.5 and written["energy"]["status"] != "error"
    assert written["cost"] == {"status": "error", "reason": "ZeroDivisionError: division by zero"}
    assert written["provenance"]["status"] == "error"
    assert written["provenance"]["reason"] == "RuntimeError: the probe failed"
    assert len(written["provenance"]["config_hash"]) == 16


def test_the_start_up_phases_a_record_takes_are_the_timelines(monkeypatch, tmp_path):
    """The schema names no phase itself: records.record_schema fills it from timeline.STARTUP,
    so a phase added there is one a record may carry, and one outside it is refused."""
    from accelstudy import timeline

    def with_phases(**phases) -> dict:
        made = record()
        made["provenance"]["timeline"]["phases"] = phases
        return made

    write_record(tmp_path / "r.json", with_phases(**{f"{p}_s": 0.5 for p in timeline.STARTUP}))
    with pytest.raises(jsonschema.ValidationError, match="compile_s"):
        write_record(tmp_path / "r.json", with_phases(compile_s=0.5))
    monkeypatch.setattr(timeline, "STARTUP", (*timeline.STARTUP, "compile"))
    write_record(tmp_path / "r.json", with_phases(compile_s=0.5))


def test_a_record_stage_is_one_of_the_layouts(monkeypatch, tmp_path):
    """The stages a record may name are layout.RECORD_STAGES, which the schema takes."""
    from accelstudy import layout

    with pytest.raises(jsonschema.ValidationError, match="pruned"):
        write_record(tmp_path / "r.json", record(stage="pruned"))
    monkeypatch.setattr(layout, "RECORD_STAGES", (*layout.RECORD_STAGES, "pruned"))
    write_record(tmp_path / "r.json", record(stage="pruned"))
