"""Energy over a job and over its measured window: each card's own counter (NVML on NVIDIA,
HLML on Gaudi, else hl-smi's power samples integrated) and the CPU packages' (RAPL); where none
is readable, `unavailable` and why, never a number. A counter that went backwards (reset, or
wrapped) makes the point's energy `invalid`."""

import os
import subprocess
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from accelstudy import timeline
from accelstudy.errors import StudyError
from accelstudy.kinds import KINDS

RAPL = Path("/sys/class/powercap")
SOURCES = ("nvml", "hlml", "hl-smi", "rapl")
EnergyCounter = Callable[[], float]  # joules since some fixed point (a driver load, a boot)


class EnergySourceError(StudyError):
    """A source the system file names is not readable on this node."""


def nvml_counter(index: int) -> EnergyCounter:
    """nvmlDeviceGetTotalEnergyConsumption of CUDA device `index`, by CUDA_VISIBLE_DEVICES."""
    import pynvml

    pynvml.nvmlInit()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    name = visible.split(",")[index] if visible else str(index)
    by_uuid = name.startswith(("GPU-", "MIG-"))
    get = pynvml.nvmlDeviceGetHandleByUUID if by_uuid else pynvml.nvmlDeviceGetHandleByIndex
    handle = get(name if by_uuid else int(name))
    return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3


def hlml_counter(index: int) -> EnergyCounter:
    """Gaudi module `index`: hlmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded."""
    import pyhlml

    pyhlml.hlmlInit()
    handle = pyhlml.hlmlDeviceGetHandleByIndex(index)
    return lambda: pyhlml.hlmlDeviceGetTotalEnergyConsumption(handle) / 1e3


class HlSmiPower:
    """Where HLML's energy counter is missing: Gaudi module `index`'s power.draw from `hl-smi`,
    sampled on a thread every period and held until the next (so the joules never go back); a
    reading spawns nothing; after a failed sample each one raises: the meter marks it invalid."""

    QUERY = ("hl-smi", "-Q", "index,power.draw", "-f", "csv,noheader,nounits")

    def __init__(self, index: int, period_s: float = 1.0) -> None:
        self.index, self.lock, self.stopped = index, threading.Lock(), threading.Event()
        self.at, self.power, self.joules = time.perf_counter(), self.watts(), 0.0
        self.failed: Exception | None = None
        threading.Thread(target=self.sample, args=(period_s,), daemon=True).start()

    def watts(self) -> float:
        listed = subprocess.run(self.QUERY, capture_output=True, text=True, check=True, timeout=30)
        for line in listed.stdout.splitlines():
            fields = [field.strip() for field in line.split(",")]
            if len(fields) == 2 and fields[0].isdigit() and int(fields[0]) == self.index:
                return float(fields[1].split()[0])  # "N/A": ValueError, a failed sample
        raise LookupError(f"hl-smi lists no module {self.index}")

    def sample(self, period_s: float) -> None:
        while not self.stopped.wait(period_s):
            try:
                power = self.watts()
            except Exception as exc:
                self.failed = exc
                return
            with self.lock:
                now = time.perf_counter()
                self.joules, self.at, self.power = self.now(now), now, power

    def now(self, at: float) -> float:
        return self.joules + self.power * (at - self.at)

    def __call__(self) -> float:
        if self.failed:
            raise self.failed
        with self.lock:
            return self.now(time.perf_counter())

    def close(self) -> None:
        self.stopped.set()


def rapl_counters() -> list[EnergyCounter]:
    """One per CPU package (intel-rapl:N, also AMD's): energy_uj where this user may read it."""
    zones = sorted(RAPL.glob("intel-rapl:*"))
    files = [z / "energy_uj" for z in zones if z.name.count(":") == 1]  # not :0:0, a subzone
    return [partial(lambda f: int(f.read_text()) / 1e6, f) for f in files if os.access(f, os.R_OK)]


# the cards' counters by source; a device kind names its own in order (accelstudy.kinds)
CARD_COUNTERS: dict[str, Callable[[int], EnergyCounter]] = dict(
    nvml=nvml_counter, hlml=hlml_counter, **{"hl-smi": HlSmiPower}
)


def card_sources(device_kind: str) -> dict[str, Callable[[int], EnergyCounter]]:
    """The kind's card counters, in its order of preference."""
    return {source: CARD_COUNTERS[source] for source in KINDS[device_kind].energy}


def card_counter(device_kind: str, index: int) -> tuple[str, EnergyCounter] | str:
    """The first of the card's counters that reads (its source and it), or why none does."""
    failed = []
    for source, make in card_sources(device_kind).items():
        try:
            counter = make(index)
            counter()
            return source, counter
        except Exception as exc:  # the library, its driver or the card's counter is missing
            failed.append(f"{source}: {type(exc).__name__}: {exc}")
    return "; ".join(failed) or f"no card energy counter on {device_kind}"


class EnergyMeter:
    """This process's card's counter (card_index, where it drives one) and, where `package`, the
    CPU packages' (one process per node), read at its start, at timeline's "measured" and "done",
    and at `stop`; `required`: the system file's sources, an error where one is missing here."""

    def __init__(
        self, device_kind: str, card_index: int | None, package: bool, required: tuple = ()
    ) -> None:
        self.counters: dict[str, list[EnergyCounter]] = {}
        self.failed = ""
        why_not: dict[str, str] = {}
        if card_index is not None:
            card = card_counter(device_kind, card_index)
            if isinstance(card, str):  # any of the card's sources the system file requires
                why_not = dict.fromkeys(list(card_sources(device_kind)) or ["card"], card)
            else:
                self.counters[card[0]] = [card[1]]
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
        self.timeline = timeline.current()  # the running job's
        self.timeline.listeners["energy"] = self.on_mark

    def read(self) -> tuple[float, dict[str, list[float]]]:
        """Every counter now; one that fails makes the energy invalid, never the job fail."""
        try:
            values = {source: [read() for read in reads] for source, reads in self.counters.items()}
        except Exception as exc:
            self.failed, values = f"an energy counter failed: {type(exc).__name__}: {exc}", {}
        return time.perf_counter(), values

    def on_mark(self, phase: str) -> None:
        if phase in (timeline.Mark.MEASURED, timeline.Mark.DONE):
            self.readings.setdefault(phase, self.read())

    def stop(self) -> dict[str, Any]:
        """Joules per source over the job and over its measured window, and their seconds."""
        self.readings["end"] = self.read()
        self.timeline.listeners.pop("energy", None)
        for counter in (c for reads in self.counters.values() for c in reads):
            getattr(counter, "close", lambda: None)()
        if not self.counters:
            return {"status": "unavailable", "reason": self.why_not}
        if self.failed:
            return {"status": "invalid", "reason": self.failed}
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
            parts = [p[f"{window}_j"] for p in measured]
            keys = dict.fromkeys(source for part in parts for source in part)  # first seen first
            sums = {source: sum(part.get(source, 0.0) for part in parts) for source in keys}
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
