"""Energy: NVML and HLML mocked at the library boundary (their real units, mJ since the driver
loaded), RAPL from a fake sysfs tree (µJ), windows, wrap-around, and what a CPU record says."""

from __future__ import annotations

import os
import sys
import time
import types

import pytest
import yaml
from accelstudy import energy, timeline
from accelstudy.energy import EnergyMeter, EnergySourceError, combine, per_unit


def fake_library(monkeypatch, name: str, prefix: str, readings: dict[str, list[int]]):
    """A stand-in for pynvml / pyhlml: handles by index (and UUID), energy in mJ, one reading
    of `readings[handle]` per call (the last repeats)."""
    module = types.ModuleType(name)
    calls: dict[str, int] = {}

    def energy_mj(handle: str) -> int:
        calls[handle] = calls.get(handle, -1) + 1
        values = readings[handle]
        return values[min(calls[handle], len(values) - 1)]

    setattr(module, f"{prefix}Init", lambda: None)
    setattr(module, f"{prefix}DeviceGetHandleByIndex", lambda i: f"index-{i}")
    setattr(module, f"{prefix}DeviceGetHandleByUUID", lambda uuid: f"uuid-{uuid}")
    setattr(module, f"{prefix}DeviceGetTotalEnergyConsumption", energy_mj)
    monkeypatch.setitem(sys.modules, name, module)
    return calls


@pytest.fixture(autouse=True)
def no_rapl(monkeypatch, tmp_path):
    monkeypatch.setattr(energy, "RAPL", tmp_path / "no-powercap")
    timeline.begin_job()  # each test's marks and listeners its own
    yield


def test_nvml_windows_in_joules_through_cuda_visible_devices(monkeypatch):
    # the card counter is read at: probe, start, measured, done, end
    mj = [5_000_000, 5_000_000, 5_400_000, 6_400_000, 6_500_000]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    calls = fake_library(monkeypatch, "pynvml", "nvml", {"uuid-GPU-bbbb": mj})
    meter = EnergyMeter("cuda", 1, package=False, required=("nvml",))
    timeline.mark("measured")
    timeline.mark("done")
    result = meter.stop()
    assert calls == {"uuid-GPU-bbbb": 4}  # the second visible card, found by its UUID
    assert result["status"] == "ok" and result["sources"] == ["nvml"]
    assert result["job_j"] == {"nvml": pytest.approx(1500.0)}
    assert result["measured_j"] == {"nvml": pytest.approx(1000.0)}


def test_hlml_by_module_index(monkeypatch):
    fake_library(monkeypatch, "pyhlml", "hlml", {"index-3": [10_000, 10_000, 250_000]})
    meter = EnergyMeter("hpu", 3, package=False)
    assert meter.stop()["job_j"] == {"hlml": pytest.approx(240.0)}


def fake_hl_smi(monkeypatch, folder, lines: str):
    """`hl-smi -Q index,power.draw -f csv,noheader,nounits` at the command boundary: prints the
    file the test rewrites, and counts its calls in another."""
    power, calls = folder / "watts", folder / "calls"
    power.write_text(lines)
    script = folder / "hl-smi"
    query = "-Q index,power.draw -f csv,noheader,nounits"
    script.write_text(f'#!/bin/sh\necho >> {calls}\n[ "$*" = "{query}" ] && /bin/cat {power}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return power, calls


def test_without_hlmls_counter_hl_smi_power_is_integrated(monkeypatch, tmp_path):
    """No pyhlml here: the Gaudi card's source is hl-smi's power.draw for module 1 (module 0
    and a blank line beside it), sampled on a thread and held: 200 W, then 300 W."""
    power, calls = fake_hl_smi(monkeypatch, tmp_path, "0, 90\n\n1, 200\n")
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # import fails: the HLML counter is missing
    meter = EnergyMeter("hpu", 1, package=False, required=("hlml",))
    assert sorted(meter.counters) == ["hl-smi"]
    meter.stop()
    counter = energy.HlSmiPower(1, period_s=0.05)
    start, began = counter(), time.perf_counter()
    time.sleep(0.5)
    middle, half = counter(), time.perf_counter()
    sampled = len(calls.read_text().splitlines())
    power.write_text("0, 90\n1, 300 W\n")
    time.sleep(0.5)
    end, ended = counter(), time.perf_counter()
    assert len(calls.read_text().splitlines()) > sampled + 3  # the thread samples, not reads
    assert middle - start == pytest.approx(200 * (half - began), rel=0.02)
    # the change lands within a sampling period (50 ms) and an hl-smi call after it was written
    assert 300 * (ended - half) - 100 * 0.25 < end - middle <= 300 * (ended - half) + 1e-6
    counter.close()


def test_hl_smi_failing_mid_job_makes_the_energy_invalid(monkeypatch, tmp_path):
    power, _ = fake_hl_smi(monkeypatch, tmp_path, "0, 200\n")
    monkeypatch.setitem(sys.modules, "pyhlml", None)
    meter = EnergyMeter("hpu", 0, package=False)
    meter.counters["hl-smi"][0].close()
    counter = energy.HlSmiPower(0, period_s=0.05)
    meter.counters["hl-smi"] = [counter]
    power.write_text("0, N/A\n")  # a failed sample: the job goes on, its energy is invalid
    time.sleep(0.3)
    result = meter.stop()
    assert result["status"] == "invalid" and set(result) == {"status", "reason"}
    assert "ValueError" in result["reason"]


def test_neither_hlml_nor_hl_smi_is_one_line(monkeypatch, tmp_path):
    """Either name in the system file's `energy` list requires the card's counter."""
    monkeypatch.setitem(sys.modules, "pyhlml", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    for required in ("hlml", "hl-smi"):
        with pytest.raises(
            EnergySourceError, match=r"hlml: ModuleNotFoundError.*; hl-smi: FileNotFoundError"
        ):
            EnergyMeter("hpu", 0, package=False, required=(required,))
    fake_hl_smi(monkeypatch, tmp_path, "0, 90\n")
    with pytest.raises(EnergySourceError, match="hl-smi: LookupError: hl-smi lists no module 5"):
        EnergyMeter("hpu", 5, package=False, required=("hlml",))


def test_a_counter_that_goes_backwards_makes_the_energy_invalid(monkeypatch):
    """A reset (driver reload) or a wrap inside a point: never a negative or wrong number."""
    fake_library(monkeypatch, "pynvml", "nvml", {"index-0": [9_000, 9_000, 20_000, 1_000]})
    meter = EnergyMeter("cuda", 0, package=False)
    timeline.mark("measured")
    result = meter.stop()
    assert result["status"] == "invalid" and "backwards" in result["reason"]
    assert "job_j" not in result and "measured_j" not in result


def fake_powercap(root, packages: dict[str, list[int]]):
    """intel-rapl:N (packages) with energy_uj; a core subzone (intel-rapl:0:0) not to count."""
    for zone, (value, _) in {**packages, "intel-rapl:0:0": [7, 7]}.items():
        (root / zone).mkdir(parents=True)
        (root / zone / "energy_uj").write_text(f"{value}\n")


def test_rapl_sums_the_packages_from_sysfs(monkeypatch, tmp_path):
    root = tmp_path / "powercap"
    packages = {"intel-rapl:0": [1_000_000, 4_000_000], "intel-rapl:1": [2_000_000, 2_500_000]}
    fake_powercap(root, packages)
    monkeypatch.setattr(energy, "RAPL", root)
    meter = EnergyMeter("cpu", None, package=True, required=("rapl",))
    for zone, (_, later) in packages.items():
        (root / zone / "energy_uj").write_text(f"{later}\n")
    (root / "intel-rapl:0:0" / "energy_uj").write_text("999999999\n")
    assert meter.stop()["job_j"] == {"rapl": pytest.approx(3.5)}


def test_nothing_readable_says_why_and_gives_no_number():
    result = combine([EnergyMeter("cpu", None, package=True).stop()])
    assert result["status"] == "unavailable"
    assert "no readable package counter" in result["reason"] and "job_j" not in result


def test_a_required_source_that_is_missing_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    with pytest.raises(EnergySourceError) as caught:
        EnergyMeter("cuda", 0, package=False, required=("nvml",))
    message = str(caught.value)
    assert "\n" not in message and "nvml" in message and "`energy`" in message


def test_ranks_combine_per_source_and_invalid_wins():
    one = {"status": "ok", "sources": ["nvml", "rapl"], "job_j": {"nvml": 10.0, "rapl": 5.0}}
    one |= {"job_s": 2.0, "measured_j": {"nvml": 6.0, "rapl": 3.0}, "measured_s": 1.0}
    two = {"status": "ok", "sources": ["nvml"], "job_j": {"nvml": 12.0}, "job_s": 2.5}
    two |= {"measured_j": {"nvml": 7.0}, "measured_s": 1.2}
    total = combine([one, two])
    assert total["job_j"] == {"nvml": 22.0, "rapl": 5.0, "total": 27.0}
    assert total["measured_j"]["total"] == 16.0 and total["measured_s"] == 1.2
    # 16 J over 1.2 s at 100 tokens/s
    assert per_unit(total, 100.0, "token")["j_per_token"] == pytest.approx(16 / 1.2 / 100, rel=1e-5)
    bad = {"status": "invalid", "reason": "an energy counter went backwards"}
    assert combine([one, bad]) == bad
    none = {"status": "unavailable", "reason": "no card energy counter on cpu"}
    assert combine([none, one])["job_j"]["total"] == 15.0
    assert per_unit(none, 100.0, "token") == none


def test_the_record_schema_takes_every_source():
    """A Gaudi job on hl-smi's power writes `sources: [hl-smi]`: the schema must take it."""
    from accelstudy.paths import SCHEMAS

    schema = yaml.safe_load((SCHEMAS / "record.schema.yaml").read_text())
    assert schema["properties"]["energy"]["properties"]["sources"]["items"]["enum"] == list(
        energy.SOURCES
    )
    system = yaml.safe_load((SCHEMAS / "system.schema.yaml").read_text())
    assert system["properties"]["energy"]["items"]["enum"] == list(energy.SOURCES)
