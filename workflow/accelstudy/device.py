"""A torch device of a registered kind (accelstudy.kinds): its timers, memory readers and name."""

import importlib.util
import os
import platform
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from accelstudy.kinds import KINDS, DeviceKind, kind_of
from accelstudy.peak import cpu_model_and_flags

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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

    kind: str  # a name in accelstudy.kinds.KINDS
    label: str = ""  # the name recorded for ranks' cards that this host lacks (the system's)

    @property
    def spec(self) -> DeviceKind:
        return KINDS[self.kind]

    @property
    def torch(self) -> torch.device:
        return torch.device(self.spec.torch_type)

    @property
    def _backend(self) -> Any:
        """torch.cuda or torch.hpu, which spell the same calls alike; None on the host."""
        return None if self.spec.host else getattr(torch, self.spec.torch_type)

    def synchronize(self) -> None:
        if self._backend:
            self._backend.synchronize()

    def reset_peak_memory(self) -> None:
        if self._backend:
            self._backend.reset_peak_memory_stats()

    def peak_memory_bytes(self) -> int:
        """Max allocated on an accelerator; the process's peak RSS on the host."""
        if self._backend:
            return int(self._backend.max_memory_allocated())
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)

    def init_process_group(self) -> None:
        """Its ranks' process group: Habana's hccl registered first; elsewhere a card kind's
        rank on its LOCAL_RANK's card (Gaudi's bridge binds its own)."""
        if self.spec.habana:
            import habana_frameworks.torch.distributed.hccl  # noqa: F401  (registers hccl)
        elif self._backend:
            self._backend.set_device(int(os.environ["LOCAL_RANK"]))
        torch.distributed.init_process_group(self.spec.backend)

    def mark_step(self) -> None:
        """Flush the lazy-mode graph on Gaudi; a no-op elsewhere."""
        if self.spec.habana:
            import habana_frameworks.torch.core as htcore

            htcore.mark_step()

    def name(self) -> str:
        if self.label or self._backend:
            return self.label or self._backend.get_device_name()
        return cpu_model_and_flags()[0] or platform.processor() or platform.machine()


def available(spec: DeviceKind) -> bool:
    """Whether this process sees a device of the kind (the host always)."""
    if spec.host:
        return True
    if spec.habana:  # Habana's PyTorch bridge installed, and seeing a Gaudi card
        if importlib.util.find_spec("habana_frameworks") is None:
            return False
        import habana_frameworks.torch.hpu as hthpu  # (its package registers the hpu device)

        return bool(hthpu.is_available())
    module = getattr(torch, spec.torch_type, None)
    return bool(module is not None and module.is_available())


def resolve(kind: str = "auto") -> Device:
    """Pick the device: an explicit kind, else $ACCELSTUDY_DEVICE, else the first card kind
    present (in the registry's order), else the host."""
    kind = os.environ.get("ACCELSTUDY_DEVICE", kind) if kind == "auto" else kind
    if kind == "auto":
        cards = [spec for spec in KINDS.values() if not spec.host and available(spec)]
        kind = (cards or [spec for spec in KINDS.values() if spec.host])[0].name
    if not available(kind_of(kind)):
        raise RuntimeError(f"device '{kind}' requested but this process sees none")
    return Device(kind)
