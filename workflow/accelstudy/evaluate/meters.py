"""Wall time, throughput and peak memory around an evaluation."""

import time
from dataclasses import dataclass, field
from typing import Self

from accelstudy import timeline
from accelstudy.device import Device


@dataclass
class Meter:
    """Count tokens through the model; read time and peak memory at the end."""

    device: Device
    tokens: int = 0
    _start: float = field(default=0.0, repr=False)
    wall_time_s: float = 0.0

    def __enter__(self) -> Self:
        self.device.synchronize()
        self.device.reset_peak_memory()
        self._start = time.perf_counter()
        timeline.mark("ready")  # an evaluation has no warm-up: measured from here
        timeline.mark("measured")
        return self

    def __exit__(self, *exc) -> None:
        self.device.synchronize()
        self.wall_time_s = time.perf_counter() - self._start
        timeline.mark("done")

    def metrics(self) -> dict[str, float | int]:
        out = {"wall_time_s": round(self.wall_time_s, 4), "tokens": self.tokens}
        out["tokens_per_s"] = round(self.tokens / self.wall_time_s, 2) if self.wall_time_s else 0.0
        return {**out, "peak_memory_bytes": self.device.peak_memory_bytes()}
