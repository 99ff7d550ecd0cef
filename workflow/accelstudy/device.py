"""cuda | hpu | cpu: the one place that knows how accelerators differ."""

import importlib.util
import os
import platform
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from accelstudy.peak import cpu_model_and_flags

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def hpu_available() -> bool:
    """True when Habana's PyTorch bridge is installed and sees a Gaudi card."""
    if importlib.util.find_spec("habana_frameworks") is None:
        return False
    import habana_frameworks.torch.hpu as hthpu  # (its package registers the hpu device)

    return bool(hthpu.is_available())


def host_peak_rss() -> int:
    """VmHWM: Linux's ru_maxrss carries a forking parent's peak across exec."""
    status = Path("/proc/self/status")
    if status.is_file():
        line = next(x for x in status.read_text().splitlines() if x.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@dataclass(frozen=True)
class Device:
    """A torch device plus the operations whose spelling depends on its kind."""

    kind: str  # "cuda" | "hpu" | "cpu"
    label: str = ""  # the name recorded for ranks' cards that this host lacks (the system's)

    @property
    def torch(self) -> torch.device:
        return torch.device(self.kind)

    @property
    def _backend(self) -> Any:
        """torch.cuda or torch.hpu, which spell the same calls alike; None on the CPU."""
        return None if self.kind == "cpu" else getattr(torch, self.kind)

    def synchronize(self) -> None:
        if self._backend:
            self._backend.synchronize()

    def reset_peak_memory(self) -> None:
        if self._backend:
            self._backend.reset_peak_memory_stats()

    def peak_memory_bytes(self) -> int:
        """Max allocated on an accelerator; the process's peak RSS on the CPU."""
        if self._backend:
            return int(self._backend.max_memory_allocated())
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)

    def mark_step(self) -> None:
        """Flush the lazy-mode graph on Gaudi; a no-op elsewhere."""
        if self.kind == "hpu":
            import habana_frameworks.torch.core as htcore

            htcore.mark_step()

    def name(self) -> str:
        if self.label or self._backend:
            return self.label or self._backend.get_device_name()
        return cpu_model_and_flags()[0] or platform.processor() or platform.machine()


def resolve(kind: str = "auto") -> Device:
    """Pick the device: an explicit kind, else $ACCELSTUDY_DEVICE, else the best present."""
    kind = os.environ.get("ACCELSTUDY_DEVICE", kind) if kind == "auto" else kind
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "hpu" if hpu_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch sees no CUDA device")
    if kind == "hpu" and not hpu_available():
        raise RuntimeError("device 'hpu' requested but habana_frameworks sees no Gaudi card")
    if kind not in {"cuda", "hpu", "cpu"}:
        raise ValueError(f"unknown device kind '{kind}'; expected cuda, hpu, cpu or auto")
    return Device(kind)
