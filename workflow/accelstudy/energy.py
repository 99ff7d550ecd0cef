"""Energy over a job and over its measured window: each card's own counter (NVML on NVIDIA, HLML
on Gaudi) and the CPU packages' (RAPL); where none is readable, `unavailable` and why, never a
number. A counter that went backwards (reset, or wrapped) makes the point's energy `invalid`."""

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelstudy import timeline
from accelstudy.errors import StudyError

RAPL = Path("/sys/class/powercap")
SOURCES = ("nvml", "hlml", "rapl")
Counter = Callable[[], float]  # joules since some fixed point (a driver load, a boot)


class EnergySourceError(StudyError):
    """A source the system file names is not readable on this node."""


def nvml_counter(index: int) -> Counter:
    """This process's CUDA device `index` (through CUDA_VISIBLE_DEVICES, by index or UUID):
    nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded."""
    import pynvml

    pynvml.nvmlInit()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    name = visible.split(",")[index] if visible else str(index)
    by_uuid = name.startswith(("GPU-", "MIG-"))
    handle = (
        pynvml.nvmlDeviceGetHandleByUUID(name)
        if by_uuid
        else pynvml.nvmlDeviceGetHandleByIndex(int(name))
    )
    return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3


def hlml_counter(index: int) -> Counter:
    """Gaudi module `index`: hlmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded."""
    import pyhlml

    pyhlml.hlmlInit()
    handle = pyhlml.hlmlDeviceGetHandleByIndex(index)
    return lambda: pyhlml.hlmlDeviceGetTotalEnergyConsumption(handle) / 1e3


def rapl_counters(root: Path | None = None) -> list[Counter]:
    """One per CPU package (intel-rapl:N, also AMD's): energy_uj where this user may read it."""
    root = root or RAPL
    zones = sorted(root.glob("intel-rapl:*")) if root.is_dir() else []
    files = [z / "energy_uj" for z in zones if z.name.count(":") == 1]  # not :0:0, a subzone
    return [lambda f=f: int(f.read_text()) / 1e6 for f in files if os.access(f, os.R_OK)]


class EnergyMeter:
    """This process's counters, read at its start, as its measured work begins and ends
    (timeline's "measured" and "done") and at `stop`: its card's (card_index, where it drives
    one) and, where `package`, the CPU packages' (one process per node reads them).
    `required`: the system file's sources, an error where one is missing here."""

    def __init__(
        self, device_kind: str, card_index: int | None, package: bool, required: tuple = ()
    ) -> None:
        self.counters: dict[str, list[Counter]] = {}
        why_not: dict[str, str] = {}
        library = {"cuda": ("nvml", nvml_counter), "hpu": ("hlml", hlml_counter)}.get(device_kind)
        if card_index is not None and library:
            try:
                counter = library[1](card_index)
                counter()
                self.counters[library[0]] = [counter]
            except Exception as exc:  # the library, its driver or the card's counter is missing
                why_not[library[0]] = f"{library[0]}: {type(exc).__name__}: {exc}"
        elif card_index is not None:
            why_not["card"] = f"no card energy counter on {device_kind}"
        if package and (found := rapl_counters()):
            self.counters["rapl"] = found
        elif package:
            why_not["rapl"] = f"rapl: no readable package counter under {RAPL}"
        for source in set(required) & set(why_not):
            raise EnergySourceError(
                f"the system file's energy source {why_not[source]}; remove '{source}' from its "
                "`energy` list or run where it is readable"
            )
        self.why_not = "; ".join(why_not.values())
        self.readings = {"start": self.read()}
        timeline.LISTENERS["energy"] = self.on_mark

    def read(self) -> tuple[float, dict[str, list[float]]]:
        values = {source: [read() for read in reads] for source, reads in self.counters.items()}
        return time.perf_counter(), values

    def on_mark(self, phase: str) -> None:
        if phase in ("measured", "done"):
            self.readings.setdefault(phase, self.read())

    def stop(self) -> dict[str, Any]:
        """Joules per source over the job and over its measured window, and their seconds."""
        self.readings["end"] = self.read()
        timeline.LISTENERS.pop("energy", None)
        if not self.counters:
            return {"status": "unavailable", "reason": self.why_not}
        out: dict[str, Any] = {"status": "ok", "sources": sorted(self.counters)}
        done = self.readings.get("done", self.readings["end"])
        windows = {"job": ("start", self.readings["end"]), "measured": ("measured", done)}
        for window, (first, (at_end, end)) in windows.items():
            if first not in self.readings:
                continue
            at_start, start = self.readings[first]
            deltas = {s: [b - a for a, b in zip(start[s], end[s], strict=True)] for s in end}
            if any(d < 0 for values in deltas.values() for d in values):
                why = f"an energy counter went backwards in the {window} window (reset or wrap)"
                return {"status": "invalid", "reason": why}
            out[f"{window}_j"] = {s: sum(values) for s, values in deltas.items()}
            out[f"{window}_s"] = at_end - at_start
        return out


def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every process's energy as the point's: joules summed per source and window, with their
    total and the longest window; invalid where one was, unavailable where none measured."""
    measured = [p for p in parts if p["status"] != "unavailable"]
    if not measured or any(p["status"] == "invalid" for p in measured):
        return next((p for p in measured if p["status"] == "invalid"), parts[0])
    sources = sorted({s for p in measured for s in p["sources"]})
    out: dict[str, Any] = {"status": "ok", "sources": sources}
    for window in ("job", "measured"):
        if all(f"{window}_j" in p for p in measured):
            sums: dict[str, float] = {}
            for part in measured:
                for source, joules in part[f"{window}_j"].items():
                    sums[source] = sums.get(source, 0.0) + joules
            sums["total"] = sum(sums.values())
            out[f"{window}_j"] = {source: round(joules, 3) for source, joules in sums.items()}
            out[f"{window}_s"] = round(max(p[f"{window}_s"] for p in measured), 3)
    return out


def per_unit(energy: dict[str, Any], rate: float | None, unit: str) -> dict[str, Any]:
    """With joules per token (or image): the measured window's mean power over its rate."""
    total, seconds = (energy.get("measured_j") or {}).get("total"), energy.get("measured_s")
    if not (total and seconds and rate):
        return energy
    return energy | {f"j_per_{unit}": float(f"{total / seconds / rate:.6g}")}
